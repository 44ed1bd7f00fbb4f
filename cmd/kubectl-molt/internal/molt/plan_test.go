package molt

import (
	"strings"
	"testing"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// A plan names the stage a resume really starts from (upgrade.ResumeAt): a
// CheckpointFailed sandbox goes on from UpgradePod, or PreUpgrade with its
// original pod, never from Checkpointing.
func TestResumeNoteNamesWhereTheResumeStarts(t *testing.T) {
	for reason, want := range map[string]string{
		agentsv1alpha1.UpgradingReasonCheckpointFailed:  "from UpgradePod (from PreUpgrade if its original pod is still there)",
		agentsv1alpha1.UpgradingReasonUpgradePodFailed:  "from UpgradePod (from PreUpgrade if its original pod is still there)",
		agentsv1alpha1.UpgradingReasonPreUpgradeFailed:  "from PreUpgrade",
		agentsv1alpha1.UpgradingReasonPostUpgradeFailed: "from PostUpgrade if its pod already runs the patched template",
	} {
		if got := resumeNote(reason); !strings.Contains(got, want) {
			t.Errorf("resumeNote(%s) = %q, want it to say %q", reason, got, want)
		}
	}
}
