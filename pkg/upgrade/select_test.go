package upgrade

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// TestSelectSaysWhyASandboxIsExcluded: every sandbox of the namespace is
// either a candidate or excluded with the rule that left it out.
func TestSelectSaysWhyASandboxIsExcluded(t *testing.T) {
	yes := true
	box := func(name string, phase agentsv1alpha1.SandboxPhase, mutate func(*agentsv1alpha1.Sandbox)) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "a"}}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
		sb.Status.Phase = phase
		if mutate != nil {
			mutate(sb)
		}
		return sb
	}
	sandboxes := []*agentsv1alpha1.Sandbox{
		box("a-run", agentsv1alpha1.SandboxRunning, nil),
		box("b-other", agentsv1alpha1.SandboxRunning, func(sb *agentsv1alpha1.Sandbox) { sb.Labels["app"] = "b" }),
		box("c-paused", agentsv1alpha1.SandboxPaused, nil),
		box("d-pool", agentsv1alpha1.SandboxRunning, func(sb *agentsv1alpha1.Sandbox) {
			sb.OwnerReferences = []metav1.OwnerReference{{Kind: "SandboxSet", Name: "warm", Controller: &yes}}
		}),
		box("e-claimed", agentsv1alpha1.SandboxRunning, func(sb *agentsv1alpha1.Sandbox) { sb.Labels[agentsv1alpha1.LabelUpdateOps] = "busy" }),
		box("f-done", agentsv1alpha1.SandboxSucceeded, nil),
		box("g-same", agentsv1alpha1.SandboxRunning, func(sb *agentsv1alpha1.Sandbox) { sb.Spec.Template.Spec.Containers[0].Image = "img:v2" }),
		// Claimed by a user (label) while the set still controls it: not in
		// the pool any more, so ops upgrade it like any claimed sandbox.
		box("h-user", agentsv1alpha1.SandboxRunning, func(sb *agentsv1alpha1.Sandbox) {
			sb.Labels[agentsv1alpha1.LabelSandboxClaimed] = "true"
			sb.OwnerReferences = []metav1.OwnerReference{{Kind: "SandboxSet", Name: "warm", Controller: &yes}}
		}),
	}
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns"}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v2"}]}}`)}
	sel, err := Select(ops, sandboxes, func(name string) bool { return name == "busy" })
	if err != nil {
		t.Fatal(err)
	}
	if len(sel.Candidates) != 2 || sel.Candidates[0].Sandbox.Name != "a-run" || sel.Candidates[1].Sandbox.Name != "h-user" {
		t.Fatalf("candidates = %+v, want a-run and h-user", sel.Candidates)
	}
	want := map[string]string{"b-other": ExcludedSelector, "c-paused": ExcludedStateFilter, "d-pool": ExcludedPoolMember,
		"e-claimed": ExcludedOtherOps, "f-done": ExcludedFinished, "g-same": ExcludedNoNeed}
	if len(sel.Excluded) != len(want) {
		t.Fatalf("excluded = %d, want %d", len(sel.Excluded), len(want))
	}
	for _, e := range sel.Excluded {
		if want[e.Sandbox.Name] != e.Reason {
			t.Errorf("%s excluded as %s, want %s", e.Sandbox.Name, e.Reason, want[e.Sandbox.Name])
		}
	}
}

// TestSelectKeepsWhatTheOpsClaimed: a sandbox the ops claimed stays a
// candidate when its labels stop matching the selector (the claim removes
// upgrade-failed, which a user may select on), so it keeps using the
// budget and no more sandboxes are admitted than maxUnavailable allows.
func TestSelectKeepsWhatTheOpsClaimed(t *testing.T) {
	failed := func(name string, claimed bool) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{}}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
		sb.Status.Phase = agentsv1alpha1.SandboxRunning
		if claimed {
			sb.Labels[agentsv1alpha1.LabelUpdateOps] = "retry" // the claim patch dropped upgrade-failed
		} else {
			sb.Labels[agentsv1alpha1.LabelUpgradeFailed] = "true"
		}
		return sb
	}
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "retry", Namespace: "ns"}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{agentsv1alpha1.LabelUpgradeFailed: "true"}}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v2"}]}}`)}
	one := intstr.FromInt32(1)
	ops.Spec.UpdateStrategy.MaxUnavailable = &one
	sel, err := Select(ops, []*agentsv1alpha1.Sandbox{failed("x1", true), failed("x2", false), failed("x3", false)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Total() != 3 || len(sel.Excluded) != 0 {
		t.Fatalf("total %d, excluded %+v: want all 3 counted, the claimed x1 included", sel.Total(), sel.Excluded)
	}
	if sel.Candidates[0].Sandbox.Name != "x1" || sel.Candidates[0].State == NotStarted {
		t.Fatalf("x1 is %v, want counted as started", sel.Candidates[0].State)
	}
	if admit := sel.ToAdmit(); len(admit) != 0 {
		t.Fatalf("admits %d more with x1 upgrading at maxUnavailable 1, want none", len(admit))
	}
}

// TestSelectCountsAnUpdatedSandboxBeingDeleted: one the ops upgraded that is
// being deleted (a finalizer holds it) stays counted as updated, so replicas
// and updated do not drop until statusagg's record of its delete takes over;
// one being deleted mid-upgrade, or never claimed, is left out.
func TestSelectCountsAnUpdatedSandboxBeingDeleted(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "u1"}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v2"}]}}`)}
	now := metav1.Now()
	box := func(name, reason string, claimed bool) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "a"},
			DeletionTimestamp: &now, Finalizers: []string{"example.com/keep"}}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v2"}}}}
		sb.Status.Phase = agentsv1alpha1.SandboxRunning
		if claimed {
			sb.Labels[agentsv1alpha1.LabelUpdateOps] = "up"
		}
		if reason != "" {
			sb.Status.Conditions = []metav1.Condition{
				{Type: ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: "u1"},
				{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
			}
		}
		return sb
	}
	sel, err := Select(ops, []*agentsv1alpha1.Sandbox{
		box("done", agentsv1alpha1.UpgradingReasonSucceeded, true),
		box("mid", agentsv1alpha1.UpgradingReasonPostUpgrade, true),
		box("never", "", false),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Total() != 1 || sel.Updated != 1 || sel.Candidates[0].Sandbox.Name != "done" {
		t.Fatalf("total %d, updated %d, candidates %+v: want only done, counted as updated", sel.Total(), sel.Updated, sel.Candidates)
	}
	if len(sel.Excluded) != 2 || sel.Excluded[0].Reason != ExcludedDeleting || sel.Excluded[1].Reason != ExcludedDeleting {
		t.Fatalf("excluded %+v, want mid and never as being deleted", sel.Excluded)
	}
}

// TestActiveOpsKeepsTheOneThatStarted: creation times have whole seconds,
// so an ops created in the same second as a running one must not take over
// because its name sorts first.
func TestActiveOpsKeepsTheOneThatStarted(t *testing.T) {
	now := metav1.Now()
	ops := func(name string, started bool, created metav1.Time) *agentsv1alpha1.SandboxUpdateOps {
		o := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created}}
		if started {
			o.Annotations = map[string]string{AnnotationPatchCheck: PatchCheckOK}
		}
		return o
	}
	earlier := metav1.NewTime(now.Add(-time.Minute))
	for _, tc := range []struct {
		name string
		list []*agentsv1alpha1.SandboxUpdateOps
		want string
	}{
		{"same second, the running one sorts last", []*agentsv1alpha1.SandboxUpdateOps{ops("b", true, now), ops("a", false, now)}, "b"},
		{"same second, neither started", []*agentsv1alpha1.SandboxUpdateOps{ops("b", false, now), ops("a", false, now)}, "a"},
		{"the oldest when neither started", []*agentsv1alpha1.SandboxUpdateOps{ops("a", false, now), ops("b", false, earlier)}, "b"},
		{"the oldest when both started", []*agentsv1alpha1.SandboxUpdateOps{ops("a", true, now), ops("b", true, earlier)}, "b"},
		{"one being deleted that still holds its finalizer (its tail finishes)", []*agentsv1alpha1.SandboxUpdateOps{deleting(ops("a", true, earlier), true), ops("b", false, now)}, "a"},
		{"one being deleted past its finalizer", []*agentsv1alpha1.SandboxUpdateOps{deleting(ops("a", true, earlier), false), ops("b", false, now)}, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ActiveOps(tc.list); got == nil || got.Name != tc.want {
				t.Fatalf("ActiveOps = %v, want %s", got, tc.want)
			}
		})
	}
	finished := ops("done", true, earlier)
	finished.Status.Phase = agentsv1alpha1.SandboxUpdateOpsCompleted
	if got := ActiveOps([]*agentsv1alpha1.SandboxUpdateOps{deleting(finished, true)}); got != nil {
		t.Errorf("ActiveOps = %s, want none: a finished ops being deleted holds nothing", got.Name)
	}
	list := []*agentsv1alpha1.SandboxUpdateOps{deleting(ops("a", true, earlier), true), ops("b", false, now)}
	if !OtherActive(list, "b")("a") {
		t.Error("OtherActive: an ops being deleted that still holds its finalizer is not active: its claimed sandboxes would be taken")
	}
}

// deleting marks o as being deleted, holding the selector's finalizer or not.
func deleting(o *agentsv1alpha1.SandboxUpdateOps, finalizer bool) *agentsv1alpha1.SandboxUpdateOps {
	now := metav1.Now()
	o.DeletionTimestamp = &now
	if finalizer {
		o.Finalizers = []string{agentsv1alpha1.FinalizerSandboxUpdateOpsProtection}
	}
	return o
}

// TestSelectCountsASandboxThatLostItsLabelMidAttempt: a sandbox whose ops
// label was removed (the claim annotation still names the ops, its status
// shows the attempt) stays counted, by its attempt: upgrading while in a
// stage (it is still claimed, and the selector puts the label back), updated
// once it succeeded, so TOTAL and UPDATED never go down; another ops's claim
// does not count. So does one whose claim annotation went with the label
// while in a stage (a replace of an older manifest); once released, after its
// attempt ended, it is not.
func TestSelectCountsASandboxThatLostItsLabelMidAttempt(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "u1"}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p"}}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v2"}]}}`)}
	unlabelled := func(name, claim, reason string) *agentsv1alpha1.Sandbox {
		sb := sandbox("", "u1", reason)
		sb.Name, sb.Namespace = name, "ns"
		sb.Annotations = map[string]string{AnnotationClaim: claim}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v2"}}}}
		sb.Status.Phase = agentsv1alpha1.SandboxUpgrading
		return sb
	}
	mid := unlabelled("mid", ClaimValue("up", "u1"), agentsv1alpha1.UpgradingReasonPreUpgrade)
	// Replaced by a manifest from before the claim (a walk's `kubectl
	// replace`): its claim annotation went with the label, its status still
	// shows the attempt in a stage.
	replaced := unlabelled("replaced", "", agentsv1alpha1.UpgradingReasonPreUpgrade)
	// Released once its attempt ended: not this ops's any more.
	released := unlabelled("released", "", agentsv1alpha1.UpgradingReasonSucceeded)
	sel, err := Select(ops, []*agentsv1alpha1.Sandbox{
		mid,
		replaced,
		released,
		unlabelled("ended", ClaimValue("up", "u1"), agentsv1alpha1.UpgradingReasonSucceeded),
		unlabelled("other", ClaimValue("up", "u0"), agentsv1alpha1.UpgradingReasonPreUpgrade),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Total() != 3 || sel.Updating != 2 || sel.Updated != 1 {
		t.Fatalf("total %d, updating %d, updated %d: want mid and replaced upgrading and ended updated, released and other left out", sel.Total(), sel.Updating, sel.Updated)
	}
	for _, sb := range []*agentsv1alpha1.Sandbox{mid, replaced} {
		if !LostLabelMidAttempt(sb, "up", "u1") || !ClaimedBy(sb, "up", "u1") || ClaimedBy(sb, "up", "u0") {
			t.Errorf("%s: LostLabelMidAttempt %v, ClaimedBy(u1) %v, ClaimedBy(u0) %v; want true, true, false", sb.Name,
				LostLabelMidAttempt(sb, "up", "u1"), ClaimedBy(sb, "up", "u1"), ClaimedBy(sb, "up", "u0"))
		}
	}
	if LostLabelMidAttempt(released, "up", "u1") || ClaimedBy(released, "up", "u1") {
		t.Errorf("released: still claimed by up after its release")
	}
}

// TestSelectLeavesOutASandboxInADirectUpgrade: a sandbox whose own direct
// upgrade (spec.upgradePolicy) is in a stage is left out for that reason, and
// the messages say to apply the ops again once it ends, not to fix a
// stateFilter that cannot take its phase.
func TestSelectLeavesOutASandboxInADirectUpgrade(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "u1"}}
	ops.Spec.Selector = &metav1.LabelSelector{}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v3"}]}}`)}
	sb := sandbox("", DirectAttempt("rev", 2), agentsv1alpha1.UpgradingReasonPreUpgrade)
	sb.Name, sb.Namespace = "direct", "ns"
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v2"}}}}
	sb.Status.Phase = agentsv1alpha1.SandboxUpgrading
	sel, err := Select(ops, []*agentsv1alpha1.Sandbox{sb}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Total() != 0 || len(sel.Excluded) != 1 || sel.Excluded[0].Reason != ExcludedDirectUpgrade || sel.Excluded[0].Detail != agentsv1alpha1.UpgradingReasonPreUpgrade {
		t.Fatalf("total %d, excluded %+v: want it left out as in a direct upgrade, in PreUpgrade", sel.Total(), sel.Excluded)
	}
	if msg := NothingSelected("ns", sel); !strings.Contains(msg, "1 is in a direct upgrade of its own (spec.upgradePolicy): once it ends, delete this ops and create it again") || strings.Contains(msg, "stateFilter") {
		t.Errorf("NothingSelected = %q", msg)
	}
	if msg := LeftOutByStateFilter(sel); !strings.Contains(msg, "direct upgrade of its own") {
		t.Errorf("LeftOutByStateFilter = %q", msg)
	}
}
