package integration

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// A sandbox labelled update-ops by hand while its direct upgrade is in
// PostUpgrade: the attempt's own report of the restore it finished is still
// recorded (a walk saw it dropped as "claimed by ops someone", and the
// watchdog fail the finished attempt two minutes later).
func TestDirectAttemptsReportIsRecordedDespiteAHandLabel(t *testing.T) {
	h := start(t)
	ns := h.env.Namespace(t)
	sb := h.runningSandbox(ns, "hl", nil)
	attempt := upgrade.DirectAttempt("rev2", sb.Generation)
	ev := func(typ string) events.Event {
		return events.Event{Type: typ, Data: events.Data{Sandbox: events.SandboxRef{Namespace: ns, Name: "hl", UID: sb.UID}, Attempt: attempt}}
	}
	for _, typ := range []string{events.TypeRequested, events.TypePreHookDone, events.TypePodReady} {
		h.publish(ev(typ))
	}
	h.waitSandbox(ns, "hl", "Upgrading/PostUpgrade", func(sb *agentsv1alpha1.Sandbox) bool {
		return upgrading(sb, agentsv1alpha1.UpgradingReasonPostUpgrade)
	})
	patch := []byte(`{"metadata":{"labels":{"` + agentsv1alpha1.LabelUpdateOps + `":"someone"}}}`)
	if _, err := h.agents.AgentsV1alpha1().Sandboxes(ns).Patch(context.Background(), "hl", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitSandbox(ns, "hl", "labelled someone", func(sb *agentsv1alpha1.Sandbox) bool {
		return sb.Labels[agentsv1alpha1.LabelUpdateOps] == "someone"
	})
	h.publish(ev(events.TypePostHookDone))
	h.waitSandbox(ns, "hl", "Upgrading/Succeeded", func(sb *agentsv1alpha1.Sandbox) bool {
		return upgrading(sb, agentsv1alpha1.UpgradingReasonSucceeded)
	})
	h.waitEvent(ns, "hl", "UpgradeSucceeded", "a direct upgrade (spec.upgradePolicy)")
}
