package integration

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/services/statusagg/internal/statusagg"
)

// TestStatusCoalescing runs statusagg with the production coalescing window
// and counts the status writes a sandbox's upgrade costs:
//   - an attempt whose events all arrive within the window is one write, its
//     end, although the label and spec writes of the selector and patcher
//     (here: a label change) wake the sandbox's sync meanwhile;
//   - a stage that lasts longer than the window is written once it has, and
//     not before.
func TestStatusCoalescing(t *testing.T) {
	const window = time.Second
	h := startWith(t, func(c *statusagg.Config) { c.Coalesce, c.EventWorkers = window, 16 })
	ns := h.env.Namespace(t)
	claimed := map[string]string{agentsv1alpha1.LabelUpdateOps: "ops-c"}
	fast := h.runningSandbox(ns, "fast", claimed)
	slow := h.runningSandbox(ns, "slow", claimed)
	ops := h.createOps(ns, "ops-c", imageV2, 2)
	h.waitOps(ns, "ops-c", "Updating 0/2", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsUpdating && o.Status.UpdatingReplicas == 2
	})

	writes := h.countStatusWrites(ns, "fast")
	h.publish(event(events.TypeRequested, fast, ops))
	time.Sleep(window / 4) // requested is recorded and waits for its write
	h.publish(event(events.TypePatched, fast, ops))
	h.label(ns, "fast", "woken", "by-a-label-write") // as the patcher's spec write wakes the sync
	time.Sleep(window / 4)
	if n := writes(); n != 0 {
		t.Errorf("half a window after requested, with the sandbox changed meanwhile: %d status writes, want 0", n)
	}
	h.publish(event(events.TypePreHookDone, fast, ops))
	h.publish(event(events.TypePodReady, fast, ops))
	h.publish(event(events.TypePostHookDone, fast, ops))
	h.waitSandbox(ns, "fast", "Succeeded", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonSucceeded) })
	time.Sleep(2 * window) // a write that was still coming would land meanwhile
	if n := writes(); n != 1 {
		t.Errorf("fast upgrade: %d status writes, want 1 (its end)", n)
	}

	writes = h.countStatusWrites(ns, "slow")
	published := time.Now()
	h.publish(event(events.TypeRequested, slow, ops))
	got := h.waitSandbox(ns, "slow", "PreUpgrade", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonPreUpgrade) })
	if shown := time.Since(published); shown < window*8/10 {
		t.Errorf("PreUpgrade written %s after requested, before the %s window", shown, window)
	}
	if got.Status.Phase != agentsv1alpha1.SandboxUpgrading {
		t.Errorf("at PreUpgrade: phase %s, want Upgrading", got.Status.Phase)
	}
	h.publish(event(events.TypePreHookDone, slow, ops))
	h.waitSandbox(ns, "slow", "UpgradePod", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonUpgradePod) })
	h.publish(event(events.TypePodReady, slow, ops))
	h.publish(event(events.TypePostHookDone, slow, ops))
	h.waitSandbox(ns, "slow", "Succeeded", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonSucceeded) })
	time.Sleep(2 * window)
	if n := writes(); n != 3 {
		t.Errorf("slow upgrade: %d status writes, want 3 (PreUpgrade, UpgradePod, and the end with PostUpgrade)", n)
	}
}

// countStatusWrites watches one sandbox from now on and returns a func
// that says how many of its changes so far changed its status.
func (h *harness) countStatusWrites(ns, name string) func() int {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	sb, err := h.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	w, err := h.agents.AgentsV1alpha1().Sandboxes(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: sb.ResourceVersion})
	if err != nil {
		h.t.Fatal(err)
	}
	counts := make(chan int, 1)
	counts <- 0
	go func() {
		last := sb.Status
		for ev := range w.ResultChan() {
			cur, ok := ev.Object.(*agentsv1alpha1.Sandbox)
			if !ok || ev.Type != watch.Modified || equality.Semantic.DeepEqual(cur.Status, last) {
				continue
			}
			last = cur.Status
			counts <- <-counts + 1
		}
	}()
	return func() int {
		n := <-counts
		counts <- n
		return n
	}
}

// label sets one label on a sandbox, a metadata write that wakes statusagg's
// sync of it.
func (h *harness) label(ns, name, key, value string) {
	h.t.Helper()
	patch := []byte(`{"metadata":{"labels":{"` + key + `":"` + value + `"}}}`)
	if _, err := h.agents.AgentsV1alpha1().Sandboxes(ns).Patch(context.Background(), name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		h.t.Fatalf("label sandbox %s/%s: %v", ns, name, err)
	}
}
