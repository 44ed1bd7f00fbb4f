package upgrade

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// Only a resumed sandbox whose failure says its workspace is kept in a
// checkpoint (the old pod gone) is left behind, and only by an ops that is
// not a CheckpointRestore.
func TestCheckpointLeftBehind(t *testing.T) {
	failed := func(name, reason, message string) Candidate {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}}
		sb.Status.Conditions = []metav1.Condition{{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason, Message: message}}
		return Candidate{Sandbox: sb, State: NotStarted, Resume: true}
	}
	kept := WithNote("pod a not Ready after 5m0s", CheckpointKeptNote("ns", "a", "ckpt-a"))
	notResumed := failed("d", agentsv1alpha1.UpgradingReasonUpgradePodFailed, kept)
	notResumed.Resume = false
	sel := Selection{Candidates: []Candidate{
		failed("a", agentsv1alpha1.UpgradingReasonUpgradePodFailed, kept),
		failed("b", agentsv1alpha1.UpgradingReasonUpgradePodFailed, "pod b not Ready after 5m0s"),
		failed("c", agentsv1alpha1.UpgradingReasonCheckpointFailed, "the checkpointer failed: the old pod keeps running"),
		notResumed,
	}}
	recreate := &agentsv1alpha1.SandboxUpdateOps{}
	if got := CheckpointLeftBehind(recreate, sel); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Recreate: %v, want [a]", got)
	}
	cr := &agentsv1alpha1.SandboxUpdateOps{}
	cr.Spec.UpdateStrategy.Type = agentsv1alpha1.UpgradeTypeCheckpointRestore
	if got := CheckpointLeftBehind(cr, sel); len(got) != 0 {
		t.Errorf("CheckpointRestore: %v, want none", got)
	}
}
