package integration

import (
	"testing"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// preUpgrade's note (it exited 0 but wrote to stderr) that reaches statusagg
// after its attempt's failure was recorded (the watchdog's deadline came
// first) is still told in a PreUpgradeNote Event: it says what the backup
// did. Before, it was dropped with the event as "attempt already ended".
func TestPreUpgradeNoteAfterTheFailureIsTold(t *testing.T) {
	h := start(t)
	ns := h.env.Namespace(t)
	sb := h.runningSandbox(ns, "late", nil)
	attempt := upgrade.DirectAttempt("rev2", sb.Generation)
	ev := func(typ string, mod func(*events.Data)) events.Event {
		e := events.Event{Type: typ, Data: events.Data{Sandbox: events.SandboxRef{Namespace: ns, Name: "late", UID: sb.UID}, Attempt: attempt}}
		if mod != nil {
			mod(&e.Data)
		}
		return e
	}
	h.publish(ev(events.TypeRequested, nil))
	h.publish(ev(events.TypeFailed, func(d *events.Data) {
		d.Stage, d.Reason, d.Message = agentsv1alpha1.UpgradingReasonPreUpgrade, agentsv1alpha1.UpgradingReasonPreUpgradeFailed, "no progress past the stage's deadline"
	}))
	h.waitSandbox(ns, "late", "Upgrading/PreUpgradeFailed", func(sb *agentsv1alpha1.Sandbox) bool {
		return upgrading(sb, agentsv1alpha1.UpgradingReasonPreUpgradeFailed)
	})
	h.publish(ev(events.TypePreHookDone, func(d *events.Data) {
		d.Message = "preUpgrade exited 0 but wrote to stderr: tar: /mnt/shared: Cannot open"
	}))
	h.waitEvent(ns, "late", "PreUpgradeNote", "tar: /mnt/shared: Cannot open")
	h.drained()
	h.waitSandbox(ns, "late", "still Upgrading/PreUpgradeFailed", func(sb *agentsv1alpha1.Sandbox) bool {
		return upgrading(sb, agentsv1alpha1.UpgradingReasonPreUpgradeFailed)
	})
}
