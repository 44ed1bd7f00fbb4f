package molt

import (
	"strings"
	"testing"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
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

// A plan of an ops with hooks names the sandboxes it would upgrade whose
// spec.runtimes lists no agent-runtime; without hooks it names none.
func TestWithoutAgentRuntime(t *testing.T) {
	sandbox := func(name string, runtimes ...string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{}
		sb.Name = name
		for _, r := range runtimes {
			sb.Spec.Runtimes = append(sb.Spec.Runtimes, agentsv1alpha1.RuntimeConfig{Name: r})
		}
		return sb
	}
	sel := upgrade.Selection{Candidates: []upgrade.Candidate{
		{Sandbox: sandbox("listed", "agent-runtime", "csi")},
		{Sandbox: sandbox("misspelt", "agent-runtim")},
		{Sandbox: sandbox("none")},
		{Sandbox: sandbox("done"), State: upgrade.Updated},
	}}
	ops := &agentsv1alpha1.SandboxUpdateOps{}
	if got := withoutAgentRuntime(ops, sel); got != nil {
		t.Errorf("an ops without hooks: %v", got)
	}
	ops.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{}}
	if got := strings.Join(withoutAgentRuntime(ops, sel), ","); got != "misspelt,none" {
		t.Errorf("an ops with a preUpgrade: %q, want misspelt,none", got)
	}
}
