package integration

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// A sandbox its user pauses while its upgrade is in a stage says at once
// that its pod is kept for the upgrade (SandboxPaused=False KeptForUpgrade):
// the writes a stage holds back (pod-only changes, for up to two minutes) do
// not hold back what the user asked for. Before, a walk saw NotPaused for
// the rest of the stage.
func TestPausedMidStageSaysSoAtOnce(t *testing.T) {
	h := start(t)
	ns := h.env.Namespace(t)
	sb := h.runningSandbox(ns, "pz", nil)
	attempt := upgrade.DirectAttempt("rev2", sb.Generation)
	h.publish(events.Event{Type: events.TypeRequested, Data: events.Data{Sandbox: events.SandboxRef{Namespace: ns, Name: "pz", UID: sb.UID}, Attempt: attempt}})
	h.waitSandbox(ns, "pz", "Upgrading/PreUpgrade", func(sb *agentsv1alpha1.Sandbox) bool {
		return upgrading(sb, agentsv1alpha1.UpgradingReasonPreUpgrade)
	})
	if _, err := h.agents.AgentsV1alpha1().Sandboxes(ns).Patch(context.Background(), "pz", types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitSandbox(ns, "pz", "SandboxPaused=False KeptForUpgrade", func(sb *agentsv1alpha1.Sandbox) bool {
		c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionSandboxPaused)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "KeptForUpgrade"
	})
}
