package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
	"molt.dev/services/statusagg/internal/statusagg"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestStatusAggregation runs one statusagg for every case, as in production
// one process serves every namespace; each case has its own namespace.
func TestStatusAggregation(t *testing.T) {
	h := start(t)
	t.Run("SandboxFollowsItsPod", func(t *testing.T) { sandboxFollowsItsPod(t, h.with(t)) })
	t.Run("UpgradeProgressesAndOpsCompletes", func(t *testing.T) { upgradeProgressesAndOpsCompletes(t, h.with(t)) })
	t.Run("FailureExhaustsTheBudget", func(t *testing.T) { failureExhaustsTheBudget(t, h.with(t)) })
	t.Run("SecondOpsWaitsForTheFirst", func(t *testing.T) { secondOpsWaitsForTheFirst(t, h.with(t)) })
	t.Run("PatchThatChangesNothingCompletes", func(t *testing.T) { patchThatChangesNothingCompletes(t, h.with(t)) })
	t.Run("LateEventStillTimesItsStage", func(t *testing.T) { lateEventStillTimesItsStage(t, h.with(t)) })
	t.Run("DeletionSaysWhatItWaitsFor", func(t *testing.T) { deletionSaysWhatItWaitsFor(t, h.with(t)) })
	t.Run("DirectEventBeforeItsRequestedWaits", func(t *testing.T) { directEventBeforeItsRequestedWaits(t, h.with(t)) })
	t.Run("ReplayedDirectAttemptOfAnotherTemplateIsStale", func(t *testing.T) { replayedDirectAttemptOfAnotherTemplateIsStale(t, h.with(t)) })
	t.Run("FailureOfAReplacedOpsAttemptEndsIt", func(t *testing.T) { failureOfAReplacedOpsAttemptEndsIt(t, h.with(t)) })
}

// A direct upgrade's posthook-done handled before its requested (a backlog after a
// failover) is not dropped: it waits for the requested, and the attempt ends Succeeded
// instead of sitting in PreUpgrade until the watchdog fails it.
func directEventBeforeItsRequestedWaits(t *testing.T, h *harness) {
	ns := h.env.Namespace(t)
	sb := h.runningSandbox(ns, "direct1", nil)
	rev, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	ev := func(typ string) events.Event {
		return events.Event{Type: typ, Data: events.Data{
			Sandbox: events.SandboxRef{Namespace: ns, Name: sb.Name, UID: sb.UID},
			Attempt: upgrade.DirectAttempt(rev, sb.Generation),
		}}
	}
	delivered := h.deliveredCount()
	h.publish(ev(events.TypePostHookDone))
	testenv.Eventually(t, timeout, "posthook-done handed to statusagg before requested exists", func() (bool, error) {
		n := h.deliveredCount()
		return n > delivered, fmt.Errorf("delivered %d, before %d", n, delivered)
	})
	h.publish(ev(events.TypeRequested))
	h.waitSandbox(ns, sb.Name, "Succeeded", func(got *agentsv1alpha1.Sandbox) bool {
		return upgrading(got, agentsv1alpha1.UpgradingReasonSucceeded)
	})
}

// A direct attempt's requested replayed after an ops upgraded the sandbox
// (the consumer was created again and replays the stream) does not start
// the sandbox over; a direct attempt of the user's edit after that ops is
// recorded.
func replayedDirectAttemptOfAnotherTemplateIsStale(t *testing.T, h *harness) {
	ns := h.env.Namespace(t)
	claimed := map[string]string{agentsv1alpha1.LabelUpdateOps: "ops-r"}
	sb := h.runningSandbox(ns, "replayed", claimed)
	ops := h.createOps(ns, "ops-r", imageV2, 1)
	h.publish(event(events.TypeRequested, sb, ops))
	h.waitSandbox(ns, sb.Name, "the ops attempt recorded", func(got *agentsv1alpha1.Sandbox) bool {
		return upgrade.CurrentAttempt(got) == string(ops.UID)
	})
	// The ops is done with it: its label goes, as on release.
	if _, err := h.agents.AgentsV1alpha1().Sandboxes(ns).Patch(context.Background(), sb.Name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+agentsv1alpha1.LabelUpdateOps+`":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	rev, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	requested := func(attempt string) events.Event {
		return events.Event{Type: events.TypeRequested, Data: events.Data{
			Sandbox: events.SandboxRef{Namespace: ns, Name: sb.Name, UID: sb.UID}, Attempt: attempt,
		}}
	}
	old := upgrade.DirectAttempt("0ld0ld0ld0", sb.Generation-1) // before the ops's attempt
	h.publish(requested(old))
	h.drained()
	time.Sleep(statusagg.DefaultStartWindow + time.Second) // an attempt's start is written within the start window
	got, err := h.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), sb.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := upgrade.CurrentAttempt(got); a != string(ops.UID) {
		t.Fatalf("after the replayed %s: attempt %q; want the ops's %s still", old, a, ops.UID)
	}
	current := upgrade.DirectAttempt(rev, sb.Generation)
	h.publish(requested(current))
	h.waitSandbox(ns, sb.Name, "the current attempt recorded", func(got *agentsv1alpha1.Sandbox) bool {
		return upgrade.CurrentAttempt(got) == current
	})
}

// An ops being deleted while a sandbox is in a stage (the selector's finalizer
// keeps it until the attempt ends) says so on its status and in an Event,
// naming that sandbox, so `kubectl delete` does not seem to hang for nothing.
func deletionSaysWhatItWaitsFor(t *testing.T, h *harness) {
	ns := h.env.Namespace(t)
	claimed := map[string]string{agentsv1alpha1.LabelUpdateOps: "ops-d"}
	d1 := h.runningSandbox(ns, "d1", claimed)
	h.runningSandbox(ns, "d2", claimed) // claimed, not started: nothing to wait for
	ops := h.createOps(ns, "ops-d", imageV2, 1)
	client := h.agents.AgentsV1alpha1().SandboxUpdateOps(ns)
	hold := []byte(`{"metadata":{"finalizers":["molt.dev/test-hold"]}}`) // the selector's finalizer, played here
	if _, err := client.Patch(context.Background(), ops.Name, types.MergePatchType, hold, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = client.Patch(context.Background(), ops.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	h.publish(event(events.TypeRequested, d1, ops))
	h.waitSandbox(ns, "d1", "Upgrading/PreUpgrade", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonPreUpgrade) })

	if err := client.Delete(context.Background(), ops.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got := h.waitOps(ns, "ops-d", "Deleting condition", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return meta.FindStatusCondition(o.Status.Conditions, agentsv1alpha1.ConditionDeleting) != nil
	})
	c := meta.FindStatusCondition(got.Status.Conditions, agentsv1alpha1.ConditionDeleting)
	if c.Status != metav1.ConditionTrue || c.Reason != agentsv1alpha1.DeletingReasonWaitingForSandboxes || !strings.Contains(c.Message, "waiting for 1 sandbox to end") || !strings.Contains(c.Message, "(d1)") {
		t.Fatalf("Deleting = %+v, want True/WaitingForSandboxes naming d1 alone", c)
	}
	h.waitEvent(ns, "ops-d", agentsv1alpha1.DeletingReasonWaitingForSandboxes, "(d1)")
}

// An ops deleted (its finalizer removed by hand) and created again under the same name
// leaves the sandbox in a stage of the old ops's attempt, which nothing drives any more.
// The watchdog's failure of that attempt (it names the old ops) ends it, so the new ops
// can resume the sandbox; any other event of the old ops is still stale, and so is its
// failure once the sandbox is in the new ops's attempt.
func failureOfAReplacedOpsAttemptEndsIt(t *testing.T, h *harness) {
	ns := h.env.Namespace(t)
	sb := h.runningSandbox(ns, "r1", map[string]string{agentsv1alpha1.LabelUpdateOps: "ops-r"})
	old := h.createOps(ns, "ops-r", imageV2, 1)
	h.publish(event(events.TypeRequested, sb, old))
	h.waitSandbox(ns, sb.Name, "Upgrading/PreUpgrade", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonPreUpgrade) })

	client := h.agents.AgentsV1alpha1().SandboxUpdateOps(ns)
	if err := client.Delete(context.Background(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, "ops "+old.Name+" gone", func() (bool, error) {
		_, err := client.Get(context.Background(), old.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	renewed := h.createOps(ns, "ops-r", imageV2, 1)

	h.publish(event(events.TypePatched, sb, old)) // stale: still PreUpgrade
	failed := event(events.TypeFailed, sb, old)
	failed.Data.Stage, failed.Data.Reason = agentsv1alpha1.UpgradingReasonPreUpgrade, agentsv1alpha1.UpgradingReasonPreUpgradeFailed
	failed.Data.Message = "no progress in PreUpgrade: SandboxUpdateOps ops-r was replaced by a new one of the same name"
	h.publish(failed)
	got := h.waitSandbox(ns, sb.Name, "PreUpgradeFailed", func(sb *agentsv1alpha1.Sandbox) bool {
		return upgrading(sb, agentsv1alpha1.UpgradingReasonPreUpgradeFailed)
	})
	if a := upgrade.CurrentAttempt(got); a != string(old.UID) {
		t.Fatalf("attempt = %q, want the old ops's %s", a, old.UID)
	}

	h.publish(event(events.TypeRequested, sb, renewed))
	h.waitSandbox(ns, sb.Name, "the new ops's attempt in PreUpgrade", func(sb *agentsv1alpha1.Sandbox) bool {
		return upgrade.CurrentAttempt(sb) == string(renewed.UID) && upgrading(sb, agentsv1alpha1.UpgradingReasonPreUpgrade)
	})
	h.redeliver(failed)
	h.drained()
	got, err := h.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), sb.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if upgrade.CurrentAttempt(got) != string(renewed.UID) || !upgrading(got, agentsv1alpha1.UpgradingReasonPreUpgrade) {
		t.Fatalf("the old ops's failure, redelivered, moved the new ops's attempt: %s", statusJSON(got.Status))
	}
}

// with returns the harness reporting to a subtest.
func (h *harness) with(t *testing.T) *harness {
	c := *h
	c.t = t
	return &c
}

// (a) A sandbox follows the pod named after it.
func sandboxFollowsItsPod(t *testing.T, h *harness) {
	ns := h.env.Namespace(t)
	sb := h.createSandbox(ns, "box", nil, imageV1)
	h.waitSandbox(ns, "box", "Pending without a pod", func(sb *agentsv1alpha1.Sandbox) bool {
		ready := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionReady)
		return sb.Status.Phase == agentsv1alpha1.SandboxPending && ready != nil && ready.Status == metav1.ConditionFalse
	})

	pod := h.createPod(sb)
	got := h.waitSandbox(ns, "box", "Running and Ready", func(sb *agentsv1alpha1.Sandbox) bool {
		return sb.Status.Phase == agentsv1alpha1.SandboxRunning && meta.IsStatusConditionTrue(sb.Status.Conditions, agentsv1alpha1.ConditionReady)
	})
	ready := meta.FindStatusCondition(got.Status.Conditions, agentsv1alpha1.ConditionReady)
	if ready.Reason != agentsv1alpha1.ReadyReasonPodReady {
		t.Errorf("Ready reason = %q, want PodReady", ready.Reason)
	}
	st := got.Status
	if st.PodInfo.PodUID != pod.UID || st.PodInfo.PodIP == "" || !strings.HasPrefix(st.PodInfo.NodeName, "kwok-node-") {
		t.Errorf("podInfo = %+v, want uid %s, an IP and a kwok node", st.PodInfo, pod.UID)
	}
	if st.SandboxIP != st.PodInfo.PodIP || st.NodeName != st.PodInfo.NodeName {
		t.Errorf("sandboxIp %q / nodeName %q differ from podInfo %+v", st.SandboxIP, st.NodeName, st.PodInfo)
	}
	if rev, _ := upgrade.Revision(got.Spec.Template); st.UpdateRevision != rev {
		t.Errorf("updateRevision = %q, want %q", st.UpdateRevision, rev)
	}
	if st.ObservedGeneration != got.Generation {
		t.Errorf("observedGeneration = %d, want %d", st.ObservedGeneration, got.Generation)
	}
}

// (b) stages progress on events and never move back; (d) the ops completes
// 2/2; (g) Events are recorded; (h) /metrics shows the counters.
func upgradeProgressesAndOpsCompletes(t *testing.T, h *harness) {
	ns := h.env.Namespace(t)
	claimed := map[string]string{agentsv1alpha1.LabelUpdateOps: "ops-b"}
	b1 := h.runningSandbox(ns, "b1", claimed)
	b2 := h.runningSandbox(ns, "b2", claimed)
	ops := h.createOps(ns, "ops-b", imageV2, 1)
	h.waitOps(ns, "ops-b", "Updating 0/2", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsUpdating && o.Status.Replicas == 2 && o.Status.UpdatingReplicas == 2
	})

	for _, step := range []struct {
		eventType string
		reason    string
	}{
		{events.TypeRequested, agentsv1alpha1.UpgradingReasonPreUpgrade},
		{events.TypePreHookDone, agentsv1alpha1.UpgradingReasonUpgradePod},
		{events.TypePodReady, agentsv1alpha1.UpgradingReasonPostUpgrade},
	} {
		h.publish(event(step.eventType, b1, ops))
		got := h.waitSandbox(ns, "b1", "Upgrading/"+step.reason, func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, step.reason) })
		ready := meta.FindStatusCondition(got.Status.Conditions, agentsv1alpha1.ConditionReady)
		attempt := meta.FindStatusCondition(got.Status.Conditions, upgrade.ConditionAttempt)
		if got.Status.Phase != agentsv1alpha1.SandboxUpgrading || ready.Status != metav1.ConditionFalse ||
			ready.Reason != agentsv1alpha1.ReadyReasonUpgrading || ready.Message != agentsv1alpha1.ReadyMessageUpgrading {
			t.Errorf("at %s: phase %s, Ready %+v; want Upgrading, False/Upgrading %q", step.reason, got.Status.Phase, ready, agentsv1alpha1.ReadyMessageUpgrading)
		}
		if attempt == nil || attempt.Message != string(ops.UID) || attempt.Reason != step.reason {
			t.Errorf("at %s: UpgradeAttempt = %+v, want message %s", step.reason, attempt, ops.UID)
		}
	}
	// Mid-flight, redelivered earlier events do not move the attempt back.
	h.redeliver(event(events.TypeRequested, b1, ops))
	h.redeliver(event(events.TypePreHookDone, b1, ops))
	h.drained()
	if sb := h.waitSandbox(ns, "b1", "read", func(*agentsv1alpha1.Sandbox) bool { return true }); !upgrading(sb, agentsv1alpha1.UpgradingReasonPostUpgrade) {
		t.Fatalf("after redelivering requested and prehook-done at PostUpgrade: status %s", statusJSON(sb.Status))
	}

	h.publish(event(events.TypePostHookDone, b1, ops))
	h.waitSandbox(ns, "b1", "Succeeded, Running, Ready", func(sb *agentsv1alpha1.Sandbox) bool {
		up := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
		ready := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionReady)
		return up != nil && up.Reason == agentsv1alpha1.UpgradingReasonSucceeded && up.Status == metav1.ConditionTrue &&
			sb.Status.Phase == agentsv1alpha1.SandboxRunning && ready.Status == metav1.ConditionTrue && ready.Reason == agentsv1alpha1.ReadyReasonPodReady
	})

	// Redelivered earlier events do not move the sandbox back.
	h.redeliver(event(events.TypePreHookDone, b1, ops))
	h.redeliver(event(events.TypeRequested, b1, ops))
	h.drained()
	if sb := h.waitSandbox(ns, "b1", "still Succeeded", func(*agentsv1alpha1.Sandbox) bool { return true }); !upgrading(sb, agentsv1alpha1.UpgradingReasonSucceeded) ||
		sb.Status.Phase != agentsv1alpha1.SandboxRunning {
		t.Fatalf("after redelivery: phase %s, status %s", sb.Status.Phase, statusJSON(sb.Status))
	}

	for _, typ := range []string{events.TypeRequested, events.TypePatched, events.TypePreHookDone, events.TypePodReady, events.TypePostHookDone} {
		h.publish(event(typ, b2, ops))
	}
	done := h.waitOps(ns, "ops-b", "Completed 2/2", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsCompleted
	})
	st := done.Status
	if st.Replicas != 2 || st.UpdatedReplicas != 2 || st.UpdatingReplicas != 0 || st.FailedReplicas != 0 || st.ObservedGeneration != done.Generation {
		t.Errorf("ops status = %s, want 2 updated of 2", statusJSON(st))
	}
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionProgressing); c == nil || c.Status != metav1.ConditionFalse || c.Reason != agentsv1alpha1.ProgressingReasonCompleted {
		t.Errorf("Progressing = %+v, want False/Completed", c)
	}

	h.waitEvent(ns, "b1", statusagg.EventUpgradeStarted, string(ops.UID))
	h.waitEvent(ns, "b1", statusagg.EventUpgradeSucceeded, "")
	h.waitEvent(ns, "ops-b", statusagg.EventOpsUpdating, "")
	h.waitEvent(ns, "ops-b", statusagg.EventOpsCompleted, "")

	series := fmt.Sprintf(`molt_ops_sandboxes{namespace=%q,ops="ops-b",state="updated"}`, ns)
	testenv.Eventually(t, timeout, series+" = 2", func() (bool, error) {
		v, ok := h.metric(series)
		return ok && v == "2", fmt.Errorf("value %q found %v", v, ok)
	})
	for _, stage := range []string{"PreUpgrade", "UpgradePod", "PostUpgrade"} {
		if _, ok := h.metric(fmt.Sprintf(`molt_stage_duration_seconds_count{stage=%q}`, stage)); !ok {
			t.Errorf("/metrics has no duration of stage %s", stage)
		}
	}
}

// A sandbox's events of different types are handled concurrently, so
// posthook-done can be decided before pod-ready: the sandbox goes from
// UpgradePod to Succeeded, pod-ready is skipped, and still both UpgradePod and
// PostUpgrade are timed, once each.
func lateEventStillTimesItsStage(t *testing.T, h *harness) {
	ns := h.env.Namespace(t)
	sb := h.runningSandbox(ns, "late", map[string]string{agentsv1alpha1.LabelUpdateOps: "ops-late"})
	ops := h.createOps(ns, "ops-late", imageV2, 1)
	count := func(stage string) int {
		v, _ := h.metric(fmt.Sprintf(`molt_stage_duration_seconds_count{stage=%q}`, stage))
		var n int
		fmt.Sscan(v, &n)
		return n
	}
	h.publish(event(events.TypeRequested, sb, ops))
	h.publish(event(events.TypePreHookDone, sb, ops))
	h.waitSandbox(ns, "late", "UpgradePod", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonUpgradePod) })
	h.drained()
	before := map[string]int{}
	for _, stage := range []string{"UpgradePod", "PostUpgrade"} {
		before[stage] = count(stage)
	}

	// As in production, pod-ready happened first: posthook-done answers it.
	podReady, postHookDone := event(events.TypePodReady, sb, ops), event(events.TypePostHookDone, sb, ops)
	podReady.Time = time.Now().UTC()
	postHookDone.Time = podReady.Time.Add(50 * time.Millisecond)
	h.publish(postHookDone)
	h.waitSandbox(ns, "late", "Succeeded", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonSucceeded) })
	h.publish(podReady)
	h.drained()
	h.redeliver(event(events.TypePodReady, sb, ops))
	h.drained()
	for _, stage := range []string{"UpgradePod", "PostUpgrade"} {
		if got := count(stage) - before[stage]; got != 1 {
			t.Errorf("%s timed %d times, want 1", stage, got)
		}
	}
}

// (c) a failure stays visible on the sandbox and, with maxUnavailable 1,
// ends the ops Failed naming the sandbox; a redelivered failure is counted once.
func failureExhaustsTheBudget(t *testing.T, h *harness) {
	ns := h.env.Namespace(t)
	c1 := h.runningSandbox(ns, "c1", map[string]string{agentsv1alpha1.LabelUpdateOps: "ops-c"})
	h.runningSandbox(ns, "c2", nil)
	ops := h.createOps(ns, "ops-c", imageV2, 1)
	h.waitOps(ns, "ops-c", "Updating 2", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsUpdating && o.Status.Replicas == 2
	})

	h.publish(event(events.TypeRequested, c1, ops))
	h.waitSandbox(ns, "c1", "PreUpgrade", func(sb *agentsv1alpha1.Sandbox) bool { return upgrading(sb, agentsv1alpha1.UpgradingReasonPreUpgrade) })
	const why = "container main: ErrImagePull - image registry.example.com/agent:v2 not found"
	failed := event(events.TypeFailed, c1, ops)
	failed.Data.Stage, failed.Data.Reason, failed.Data.Message = agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonUpgradePodFailed, why
	h.publish(failed)
	got := h.waitSandbox(ns, "c1", "UpgradePodFailed", func(sb *agentsv1alpha1.Sandbox) bool {
		return upgrading(sb, agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	})
	up := meta.FindStatusCondition(got.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
	if up.Status != metav1.ConditionFalse || up.Message != why || !strings.HasPrefix(got.Status.Message, why+"; ") || !strings.Contains(got.Status.Message, "kubectl molt retry ops-c") || got.Status.Phase != agentsv1alpha1.SandboxUpgrading {
		t.Errorf("failed sandbox: phase %s, message %q, Upgrading %+v", got.Status.Phase, got.Status.Message, up)
	}

	done := h.waitOps(ns, "ops-c", "Failed", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsFailed
	})
	if st := done.Status; st.Replicas != 2 || st.FailedReplicas != 1 || st.UpdatingReplicas != 0 || st.UpdatedReplicas != 0 {
		t.Errorf("ops status = %s, want 1 failed of 2 (the `kubectl get suo` columns)", statusJSON(st))
	}
	budget := meta.FindStatusCondition(done.Status.Conditions, agentsv1alpha1.ConditionFailureBudgetExhausted)
	if budget == nil || budget.Status != metav1.ConditionTrue || !strings.Contains(budget.Message, "c1") || !strings.Contains(budget.Message, "1 not started") {
		t.Errorf("FailureBudgetExhausted = %+v, want True naming c1 and 1 not started", budget)
	}

	h.redeliver(failed)
	h.drained()
	if v, ok := h.metric(`molt_upgrade_failures_total{reason="UpgradePodFailed"}`); v != "1" {
		t.Errorf("molt_upgrade_failures_total{reason=UpgradePodFailed} = %q (found %v), want 1 after a redelivery", v, ok)
	}
	// The Warning Event's reason is the failed reason itself, as upstream's.
	ev := h.waitEvent(ns, "c1", agentsv1alpha1.UpgradingReasonUpgradePodFailed, why)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("UpgradePodFailed Event type = %s, want Warning", ev.Type)
	}
	h.waitEvent(ns, "ops-c", statusagg.EventOpsFailed, "c1")
}

// (e) a second ops waits in Pending naming the active one, and starts by
// itself once the first ends.
func secondOpsWaitsForTheFirst(t *testing.T, h *harness) {
	ns := h.env.Namespace(t)
	sb := h.createSandbox(ns, "e1", map[string]string{agentsv1alpha1.LabelUpdateOps: "a-first"}, imageV1)
	first := h.createOps(ns, "a-first", imageV2, 1)
	h.waitOps(ns, "a-first", "Updating", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsUpdating
	})
	h.createOps(ns, "b-second", imageV2, 1)
	h.waitOps(ns, "b-second", "Pending, waiting for a-first", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		c := meta.FindStatusCondition(o.Status.Conditions, agentsv1alpha1.ConditionWaitingForNamespace)
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsPending && c != nil && c.Status == metav1.ConditionTrue &&
			c.Message == "waiting for SandboxUpdateOps a-first to finish"
	})
	h.waitEvent(ns, "b-second", statusagg.EventOpsWaiting, "a-first")

	h.publish(event(events.TypeRequested, sb, first))
	h.publish(event(events.TypePostHookDone, sb, first))
	h.waitOps(ns, "a-first", "Completed", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsCompleted
	})
	h.waitOps(ns, "b-second", "no longer waiting", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.Phase != agentsv1alpha1.SandboxUpdateOpsPending &&
			meta.IsStatusConditionFalse(o.Status.Conditions, agentsv1alpha1.ConditionWaitingForNamespace)
	})
}

// (f) an ops whose patch changes nothing completes at once.
func patchThatChangesNothingCompletes(t *testing.T, h *harness) {
	ns := h.env.Namespace(t)
	h.runningSandbox(ns, "f1", nil)
	h.createOps(ns, "ops-f", imageV1, 1)
	done := h.waitOps(ns, "ops-f", "Completed", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsCompleted
	})
	c := meta.FindStatusCondition(done.Status.Conditions, agentsv1alpha1.ConditionProgressing)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != agentsv1alpha1.ProgressingReasonNothingToUpdate ||
		c.Message != "no sandbox needs this patch: of the 1 sandbox in namespace "+ns+", 1 already has the patched template" {
		t.Errorf("Progressing = %+v, want False/NothingToUpdate", c)
	}
	if done.Status.Replicas != 0 {
		t.Errorf("replicas = %d, want 0", done.Status.Replicas)
	}
	// failedReplicas and the other counters are serialised even when 0.
	raw, err := h.agents.AgentsV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxupdateops").Name("ops-f").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"replicas":0`, `"updatedReplicas":0`, `"updatingReplicas":0`, `"failedReplicas":0`} {
		if !strings.Contains(string(raw), field) {
			t.Errorf("ops JSON lacks %s: %s", field, raw)
		}
	}

	// Edited once finished, it stays Completed and says it saw the edit, so a tool
	// that waits for observedGeneration does not wait for ever.
	edited, err := h.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Patch(context.Background(), "ops-f", types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.waitOps(ns, "ops-f", "observedGeneration of the edit", func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		return o.Status.ObservedGeneration == edited.Generation && o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsCompleted
	})
}

// TestSandboxWithAnUndecodableTemplate: the API server stores a template
// with a field of the wrong type (the CRD keeps no schema for it). The
// sandbox says why it has no pod, the template is kept as written through
// statusagg's writes, and a sandbox created after it is served as usual:
// the one bad object does not stop statusagg's informers.
func TestSandboxWithAnUndecodableTemplate(t *testing.T) {
	h := start(t)
	ns := h.env.Namespace(t)
	ctx := context.Background()
	raw := `{"apiVersion":"agents.kruise.io/v1alpha1","kind":"Sandbox","metadata":{"name":"bad"},
	  "spec":{"template":{"spec":{"containers":[{"name":"main","image":5,"resources":{"limits":{"cpu":"1 core"}}}]}}}}`
	if err := h.agents.AgentsV1alpha1().RESTClient().Post().Namespace(ns).Resource("sandboxes").
		Body([]byte(raw)).SetHeader("Content-Type", "application/json").Do(ctx).Error(); err != nil {
		t.Fatalf("create the sandbox with a mistyped template: %v", err)
	}
	bad := h.waitSandbox(ns, "bad", "Ready=False PodCreateFailed", func(sb *agentsv1alpha1.Sandbox) bool {
		c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionReady)
		return c != nil && c.Reason == agentsv1alpha1.ReadyReasonPodCreateFailed
	})
	if c := meta.FindStatusCondition(bad.Status.Conditions, agentsv1alpha1.ConditionReady); !strings.Contains(c.Message, "spec.template") || !strings.Contains(c.Message, "quantities") {
		t.Errorf("Ready message %q, want the field and the decoder's cause", c.Message)
	}
	h.waitEvent(ns, "bad", agentsv1alpha1.ReadyReasonPodCreateFailed, "spec.template")

	stored, err := h.agents.AgentsV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxes").Name("bad").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(stored), `"image":5`) {
		t.Errorf("after statusagg's writes the sandbox is %s, want its template as written", stored)
	}

	h.runningSandbox(ns, "good", nil)
	h.waitSandbox(ns, "good", "Running", func(sb *agentsv1alpha1.Sandbox) bool { return sb.Status.Phase == agentsv1alpha1.SandboxRunning })
}
