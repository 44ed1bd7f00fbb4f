package statusagg

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// An ops being deleted names the sandboxes its deletion waits for: those it
// claimed whose attempt of this ops is still in a stage, and no other.
func TestDeletionWaitsForTheSandboxesInAStage(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "ops-uid"}}
	ops.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"main","image":"v2"}]}}`)
	image := "v1"
	box := func(name, claim, attempt, reason string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{}}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}}}
		if claim != "" {
			sb.Labels[agentsv1alpha1.LabelUpdateOps] = claim
		}
		if attempt != "" {
			sb.Status.Conditions = []metav1.Condition{
				{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: attempt},
				{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
			}
		}
		return sb
	}
	sandboxes := []*agentsv1alpha1.Sandbox{
		box("c-post", "up", "ops-uid", agentsv1alpha1.UpgradingReasonPostUpgrade),
		box("a-pre", "up", "ops-uid", agentsv1alpha1.UpgradingReasonPreUpgrade),
		box("b-done", "up", "ops-uid", agentsv1alpha1.UpgradingReasonSucceeded),
		box("d-failed", "up", "ops-uid", agentsv1alpha1.UpgradingReasonPreUpgradeFailed),
		box("e-not-started", "up", "", ""),
		box("f-other-ops", "other", "other-uid", agentsv1alpha1.UpgradingReasonUpgradePod),
		box("g-older-attempt", "up", "old-uid", agentsv1alpha1.UpgradingReasonUpgradePod),
	}
	// The patcher wrote the patch and statusagg has not recorded the attempt yet: the
	// selector's release holds it too.
	image = "v2"
	sandboxes = append(sandboxes, box("h-patched-not-recorded", "up", "", ""))
	deleting := box("i-being-deleted", "up", "ops-uid", agentsv1alpha1.UpgradingReasonPreUpgrade)
	deleting.DeletionTimestamp = &metav1.Time{}
	sandboxes = append(sandboxes, deleting)
	got := deletionWaitsFor(ops, sandboxes)
	if want := []string{"a-pre", "c-post", "h-patched-not-recorded"}; !slices.Equal(got, want) {
		t.Fatalf("waits for %v, want %v", got, want)
	}
	if msg := deletionWaitMessage(got); !strings.Contains(msg, "waiting for 3 sandboxes") || !strings.Contains(msg, "(a-pre, c-post, h-patched-not-recorded)") {
		t.Errorf("message %q does not count and name them", msg)
	}
	many := make([]string, 25)
	for i := range many {
		many[i] = "s" + strings.Repeat("x", i)
	}
	if msg := deletionWaitMessage(many); !strings.Contains(msg, "and 15 more") || len(msg) > agentsv1alpha1.MaxConditionMessageLength {
		t.Errorf("message for 25 = %q (%d bytes), want 10 named and 15 more, within a condition's length", msg, len(msg))
	}
}

// Once no sandbox is in an attempt of an ops being deleted, the selector takes
// its label off the sandboxes and then its finalizer off the ops, each step in
// well under a second. When what is left to release has not changed for
// releaseOverdue (no selector runs, or the API server refuses its writes),
// Deleting says so, naming the sandboxes and where to look; a release that
// makes progress, however long, is not pending. Before that it says nothing
// and asks to look again when it would be due.
func TestDeletingSaysAReleaseIsPending(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "ops-uid",
		DeletionTimestamp: &metav1.Time{Time: t0.Add(-time.Hour)}, Finalizers: []string{agentsv1alpha1.FinalizerSandboxUpdateOpsProtection}}}
	ops.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"main","image":"v2"}]}}`)
	labelled := func(name, ops string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: ops}}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "v1"}}}}
		return sb
	}
	going := labelled("c-going", "up")
	going.DeletionTimestamp = &metav1.Time{Time: t0}
	sandboxes := []*agentsv1alpha1.Sandbox{labelled("b-left", "up"), labelled("a-left", "up"), labelled("other", "other"), going}
	var w releaseWatch
	quiet := func(at time.Duration, sandboxes []*agentsv1alpha1.Sandbox, wantRecheck time.Duration) {
		t.Helper()
		if cond, recheck := deletingCondition(ops, sandboxes, t0.Add(at), &w); cond != nil || recheck != wantRecheck {
			t.Errorf("at +%s: %+v, recheck in %s; want nothing yet, recheck in %s", at, cond, recheck, wantRecheck)
		}
	}

	quiet(0, sandboxes, releaseOverdue) // first seen now: the hour since the delete went to attempts
	quiet(10*time.Second, sandboxes, releaseOverdue-10*time.Second)
	cond, recheck := deletingCondition(ops, sandboxes, t0.Add(releaseOverdue+time.Second), &w)
	if cond == nil || recheck != 0 || cond.Reason != agentsv1alpha1.DeletingReasonReleasePending ||
		!strings.Contains(cond.Message, "2 sandboxes (a-left, b-left) still carry its label agents.kruise.io/update-ops=up, unchanged for 30s or more") ||
		!strings.Contains(cond.Message, "Is a selector running") {
		t.Fatalf("after releaseOverdue without progress: %+v, recheck %s; want ReleasePending naming a-left and b-left", cond, recheck)
	}
	// The same again later: the same words, so no new status write.
	if again, _ := deletingCondition(ops, sandboxes, t0.Add(releaseOverdue+10*time.Second), &w); again == nil || again.Message != cond.Message {
		t.Errorf("10 s later: %+v, want the same condition as before", again)
	}
	// The selector releases one: progress, the count starts again; once
	// ReleasePending was written, it turns to Releasing.
	quiet(40*time.Second, sandboxes[1:], releaseOverdue)
	quiet(40*time.Second+releaseOverdue-time.Second, sandboxes[1:], time.Second)
	pending := ops.DeepCopy()
	pending.Status.Conditions = []metav1.Condition{*cond}
	if moving, recheck := deletingCondition(pending, sandboxes[2:], t0.Add(time.Minute+10*time.Second), &w); moving == nil || moving.Reason != agentsv1alpha1.DeletingReasonReleasing || recheck != releaseOverdue {
		t.Errorf("released one more after ReleasePending: %+v, recheck %s; want Releasing, recheck in %s", moving, recheck, releaseOverdue)
	}
	w.forget("ns/up")
	// Every label off, then the finalizer stays on.
	quiet(time.Hour, sandboxes[2:], releaseOverdue)
	cond, _ = deletingCondition(ops, sandboxes[2:], t0.Add(time.Hour+releaseOverdue), &w)
	if cond == nil || cond.Reason != agentsv1alpha1.DeletingReasonReleasePending || !strings.Contains(cond.Message, "finalizer "+agentsv1alpha1.FinalizerSandboxUpdateOpsProtection+" is still on it") {
		t.Errorf("finalizer left: %+v", cond)
	}
	// Nothing of molt's left: nothing to say (another finalizer is its owner's).
	released := ops.DeepCopy()
	released.Finalizers = []string{"example.com/other"}
	if cond, recheck := deletingCondition(released, sandboxes[2:], t0.Add(2*time.Hour), &w); cond != nil || recheck != 0 {
		t.Errorf("released: %+v, recheck %s; want nothing", cond, recheck)
	}
	// A sandbox in an attempt: the deletion waits for it, and the count of
	// the release starts only once it has ended.
	inStage := labelled("d-pre", "up")
	inStage.Status.Conditions = []metav1.Condition{
		{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: "ops-uid"},
		{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: agentsv1alpha1.UpgradingReasonPreUpgrade},
	}
	if cond, _ := deletingCondition(ops, append(sandboxes, inStage), t0.Add(3*time.Hour), &w); cond == nil || cond.Reason != agentsv1alpha1.DeletingReasonWaitingForSandboxes || !strings.Contains(cond.Message, "(d-pre)") {
		t.Errorf("with d-pre in PreUpgrade: %+v, want WaitingForSandboxes naming it", cond)
	}
	quiet(3*time.Hour+time.Second, sandboxes, releaseOverdue)
	// Once d-pre ended, a WaitingForSandboxes written before would be
	// stale (it names d-pre): it turns to Releasing.
	waited := ops.DeepCopy()
	waited.Status.Conditions = []metav1.Condition{{Type: agentsv1alpha1.ConditionDeleting, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.DeletingReasonWaitingForSandboxes, Message: "being deleted: waiting for 1 sandbox to end the attempt they are in (d-pre)"}}
	if cond, recheck := deletingCondition(waited, sandboxes, t0.Add(3*time.Hour+2*time.Second), &w); cond == nil || cond.Reason != agentsv1alpha1.DeletingReasonReleasing || strings.Contains(cond.Message, "d-pre") || recheck <= 0 {
		t.Errorf("after d-pre ended, with WaitingForSandboxes written: %+v, recheck %s; want Releasing, and a recheck for ReleasePending", cond, recheck)
	}
}

// An ops being deleted counts its sandboxes as they finish their attempts
// (with no selector running, its release waits): "1 updating" of a sandbox
// that succeeded since is out of date. Updated and failed do not go down as
// the release takes the ops's label off; replicas stays.
func TestDeletingOpsCountsItsSandboxesAsTheyFinish(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "ops-uid", DeletionTimestamp: &metav1.Time{}}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p"}}
	ops.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"main","image":"v2"}]}}`)
	box := func(name, claim, reason string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"pool": "p"}}}
		image := "v1"
		if reason != "" {
			image = "v2"
		}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}}}
		sb.Status.Phase = agentsv1alpha1.SandboxRunning
		if claim != "" {
			sb.Labels[agentsv1alpha1.LabelUpdateOps] = claim
		}
		if reason != "" {
			sb.Status.Conditions = []metav1.Condition{
				{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: "ops-uid"},
				{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
			}
		}
		return sb
	}
	st := agentsv1alpha1.SandboxUpdateOpsStatus{Replicas: 4, UpdatedReplicas: 1, UpdatingReplicas: 2, FailedReplicas: 0}
	// One of the two updating has succeeded since, the other failed; one
	// succeeded before and was released already (no label).
	recountDeleting(&st, ops, []*agentsv1alpha1.Sandbox{
		box("was-updating-ok", "up", agentsv1alpha1.UpgradingReasonSucceeded),
		box("was-updating-failed", "up", agentsv1alpha1.UpgradingReasonPostUpgradeFailed),
		box("released", "", ""),
		box("not-started", "", ""),
	})
	want := agentsv1alpha1.SandboxUpdateOpsStatus{Replicas: 4, UpdatedReplicas: 1, UpdatingReplicas: 0, FailedReplicas: 1}
	if !equality.Semantic.DeepEqual(st, want) {
		t.Errorf("counts %+v, want %+v", st, want)
	}
	st = agentsv1alpha1.SandboxUpdateOpsStatus{Replicas: 2, UpdatedReplicas: 0, UpdatingReplicas: 2, Conditions: []metav1.Condition{
		{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.ProgressingReasonUpdating, Message: "0 of 2 sandboxes updated, 2 updating, 0 failed"}}}
	recountDeleting(&st, ops, []*agentsv1alpha1.Sandbox{box("a", "up", agentsv1alpha1.UpgradingReasonSucceeded), box("b", "up", agentsv1alpha1.UpgradingReasonPostUpgrade)})
	if want := (agentsv1alpha1.SandboxUpdateOpsStatus{Replicas: 2, UpdatedReplicas: 1, UpdatingReplicas: 1}); st.Replicas != want.Replicas || st.UpdatedReplicas != want.UpdatedReplicas || st.UpdatingReplicas != want.UpdatingReplicas || st.FailedReplicas != want.FailedReplicas {
		t.Errorf("counts %+v, want %+v", st, want)
	}
	if p := st.Conditions[0]; !strings.HasPrefix(p.Message, "1 of 2 sandboxes updated, 1 updating, 0 failed; the ops is being deleted") {
		t.Errorf("Progressing says %q, want the counts of now", p.Message)
	}
}
