package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
	"molt.dev/services/statusagg/internal/statusagg"
)

// TestStatusCoalescing counts the status writes a sandbox's upgrade costs,
// with windows wider than production's (1s, 200ms) so that the test's own
// pauses, API calls and deliveries on a loaded machine cannot outlast them:
//   - an attempt's start is written within the start window, with the
//     events of that moment (a hook-less start: requested, patched,
//     prehook-done), so a user sees the sandbox Upgrading at once;
//   - a later stage that ends within the window is written only with the
//     next one, although a metadata write (here a label, as the selector's
//     and patcher's writes do) wakes the sandbox's sync meanwhile; its end
//     is written at once: a fast upgrade is two writes;
//   - a stage that lasts longer than the window is written once it has, and
//     not before.
func TestStatusCoalescing(t *testing.T) {
	const window, startWindow = 4 * time.Second, 2 * time.Second
	h := startWith(t, func(c *statusagg.Config) { c.Coalesce, c.StartWindow, c.EventWorkers = window, startWindow, 16 })
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
	h.publish(event(events.TypePatched, fast, ops))
	h.publish(event(events.TypePreHookDone, fast, ops))
	got := h.waitSandbox(ns, "fast", "Upgrading", func(sb *agentsv1alpha1.Sandbox) bool { return sb.Status.Phase == agentsv1alpha1.SandboxUpgrading })
	if !upgrading(got, agentsv1alpha1.UpgradingReasonUpgradePod) {
		t.Errorf("the start's write shows %s, want the burst's last stage UpgradePod", statusJSON(got.Status))
	}
	h.publish(event(events.TypePodReady, fast, ops))
	time.Sleep(window / 4) // pod-ready is recorded and waits for its write
	h.label(ns, "fast", "woken", "by-a-label-write")
	time.Sleep(window / 4)
	if n := writes(); n != 1 {
		t.Errorf("half a window after pod-ready, with the sandbox changed meanwhile: %d status writes, want 1 (the start)", n)
	}
	h.publish(event(events.TypePostHookDone, fast, ops))
	h.waitSandbox(ns, "fast", "Succeeded", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonSucceeded) })
	time.Sleep(2 * window) // a write that was still coming would land meanwhile
	if n := writes(); n != 2 {
		t.Errorf("fast upgrade: %d status writes, want 2 (its start and its end)", n)
	}

	writes = h.countStatusWrites(ns, "slow")
	h.publish(event(events.TypeRequested, slow, ops))
	h.waitSandbox(ns, "slow", "PreUpgrade", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonPreUpgrade) })
	published := time.Now()
	h.publish(event(events.TypePreHookDone, slow, ops))
	h.waitSandbox(ns, "slow", "UpgradePod", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonUpgradePod) })
	if shown := time.Since(published); shown < window*8/10 {
		t.Errorf("UpgradePod written %s after prehook-done, before the %s window", shown, window)
	}
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

// TestPodReplacedInAStageCostsNoWrite: while an attempt is in UpgradePod, the
// pod's replacement (the old one deleted, the new one created and Ready) is
// not written by itself, even once the informer has shown the stage's write
// and statusagg has dropped what it kept for it: the end's write carries the
// new pod. The whole upgrade is two writes, its start and its end, and the
// end shows the sandbox Running on the new pod.
func TestPodReplacedInAStageCostsNoWrite(t *testing.T) {
	// Wide windows, as in TestStatusCoalescing: the start's burst and the
	// end's pod-ready and posthook-done each arrive within theirs.
	const window, startWindow = 4 * time.Second, 2 * time.Second
	h := startWith(t, func(c *statusagg.Config) { c.Coalesce, c.StartWindow, c.EventWorkers = window, startWindow, 16 })
	ns := h.env.Namespace(t)
	sb := h.runningSandbox(ns, "swap", map[string]string{agentsv1alpha1.LabelUpdateOps: "ops-s"})
	ops := h.createOps(ns, "ops-s", imageV2, 1)
	h.waitOps(ns, "ops-s", "Updating 0/1", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsUpdating && o.Status.UpdatingReplicas == 1
	})

	writes := h.countStatusWrites(ns, "swap")
	h.publish(event(events.TypeRequested, sb, ops))
	h.publish(event(events.TypePatched, sb, ops))
	h.publish(event(events.TypePreHookDone, sb, ops))
	h.waitSandbox(ns, "swap", "UpgradePod", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonUpgradePod) })
	time.Sleep(window) // the informer shows the write; statusagg drops its copy

	if err := h.env.Kube.CoreV1().Pods(ns).Delete(context.Background(), "swap", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	h.waitPodGone(ns, "swap")
	pod := h.createPod(sb)
	h.waitPodReady(ns, "swap")
	time.Sleep(2 * window) // a write of the pod change would land meanwhile
	if n := writes(); n != 1 {
		t.Errorf("pod replaced during UpgradePod: %d status writes, want 1 (the start)", n)
	}

	h.publish(event(events.TypePodReady, sb, ops))
	h.publish(event(events.TypePostHookDone, sb, ops))
	got := h.waitSandbox(ns, "swap", "Succeeded", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonSucceeded) })
	if got.Status.Phase != agentsv1alpha1.SandboxRunning || got.Status.PodInfo.PodUID != pod.UID {
		t.Errorf("the end's write shows phase %s on pod %s, want Running on the new pod %s", got.Status.Phase, got.Status.PodInfo.PodUID, pod.UID)
	}
	time.Sleep(2 * window)
	if n := writes(); n != 2 {
		t.Errorf("upgrade with its pod replaced: %d status writes, want 2 (its start and its end)", n)
	}
}

// waitPodGone waits until the pod ns/name no longer exists.
func (h *harness) waitPodGone(ns, name string) {
	h.t.Helper()
	testenv.Eventually(h.t, 30*time.Second, "pod "+ns+"/"+name+" gone", func() (bool, error) {
		_, err := h.env.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// waitPodReady waits until the pod ns/name is Ready.
func (h *harness) waitPodReady(ns, name string) {
	h.t.Helper()
	testenv.Eventually(h.t, 30*time.Second, "pod "+ns+"/"+name+" Ready", func() (bool, error) {
		pod, err := h.env.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestStartNotWrittenAfterTheOpsReleasedTheSandbox: an attempt's start is
// written after its window, and its ops can be deleted meanwhile: the
// selector then releases the sandbox (removes the ops label) while the
// template is still unpatched. The start's write must not land after that
// release, or the sandbox shows an upgrade nothing drives, with no ops label
// to say whose, until the watchdog fails it for good. Here the label goes as
// soon as statusagg has taken the `requested` and before its write: the
// event is retried, skipped against the released sandbox, and the status
// never shows the attempt. The start window is wide (production's is 200ms)
// so that the release lands within it however slow the machine; the
// `requested` waits for its write before it is acked, so the write is tried
// before the consumer is drained, however late.
func TestStartNotWrittenAfterTheOpsReleasedTheSandbox(t *testing.T) {
	h := startWith(t, func(c *statusagg.Config) { c.Coalesce, c.StartWindow = 5*time.Second, 3*time.Second })
	ns := h.env.Namespace(t)
	sb := h.runningSandbox(ns, "released", map[string]string{agentsv1alpha1.LabelUpdateOps: "ops-r"})
	ops := h.createOps(ns, "ops-r", imageV2, 1)
	h.waitOps(ns, "ops-r", "Updating", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsUpdating
	})
	h.drained()
	writes := h.countStatusWrites(ns, "released")

	delivered := h.deliveredCount()
	h.publish(event(events.TypeRequested, sb, ops))
	testenv.Eventually(t, timeout, "requested delivered to statusagg", func() (bool, error) {
		return h.deliveredCount() > delivered, nil
	})
	release := []byte(`{"metadata":{"labels":{"` + agentsv1alpha1.LabelUpdateOps + `":null}}}`)
	if _, err := h.agents.AgentsV1alpha1().Sandboxes(ns).Patch(context.Background(), "released", "application/merge-patch+json", release, metav1.PatchOptions{}); err != nil {
		t.Fatalf("release sandbox: %v", err)
	}
	h.drained()
	testenv.Consistently(t, time.Second, "no status write after the release", func() (bool, error) {
		n := writes()
		return n == 0, fmt.Errorf("%d status writes", n)
	})

	got, err := h.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), "released", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, recorded := upgrade.ReasonFor(got, string(ops.UID)); recorded || got.Status.Phase != agentsv1alpha1.SandboxRunning {
		t.Errorf("released sandbox: phase %s, status %s; want Running with no attempt of ops-r", got.Status.Phase, statusJSON(got.Status))
	}
}
