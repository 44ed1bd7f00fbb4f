package upgrade

import (
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

func hooks(pre string) *agentsv1alpha1.SandboxLifecycle {
	return &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{
		Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/sh", "-c", pre}}, TimeoutSeconds: 30}}
}

func withKept(sb *agentsv1alpha1.Sandbox, kept string) *agentsv1alpha1.Sandbox {
	sb.Annotations = map[string]string{AnnotationOwnLifecycle: kept}
	return sb
}

func TestKeepOwnLifecycle(t *testing.T) {
	own, opsA, opsB, edited := hooks("own"), hooks("a"), hooks("b"), hooks("edited")
	direct := &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
	keptAOverOwn := KeepOwnLifecycle(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: own}}, opsA)
	for _, tc := range []struct {
		name    string
		sb      *agentsv1alpha1.Sandbox
		written *agentsv1alpha1.SandboxLifecycle
		want    *KeptLifecycle // nil: nothing kept
	}{
		{"own hooks replaced", &agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: own}}, opsA, &KeptLifecycle{Own: own, Written: opsA}},
		{"own hooks removed by an ops with none", &agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: own}}, nil, &KeptLifecycle{Own: own}},
		{"the ops's hooks are the sandbox's already", &agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: opsA}}, hooks("a"), nil},
		{"no hooks and no upgradePolicy: nothing of its own to keep", &agentsv1alpha1.Sandbox{}, opsA, nil},
		{"no hooks with upgradePolicy: none is kept", &agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{UpgradePolicy: direct}}, opsA, &KeptLifecycle{Written: opsA}},
		{"a second ops keeps the first one's own", withKept(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: opsA}}, keptAOverOwn), opsB, &KeptLifecycle{Own: own, Written: opsB}},
		{"edited since the first ops: the edit is its own", withKept(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: edited}}, keptAOverOwn), opsB, &KeptLifecycle{Own: edited, Written: opsB}},
		{"an annotation that cannot be read: the lifecycle now is kept", withKept(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: opsA}}, "{"), opsB, &KeptLifecycle{Own: opsA, Written: opsB}},
		{"removed since the first ops, no upgradePolicy: none is its own now", withKept(&agentsv1alpha1.Sandbox{}, keptAOverOwn), opsB, &KeptLifecycle{Written: opsB}},
		// A first ops wrote its hooks over none and kept nothing (it
		// failed, say): they are not the sandbox's own, and do not come
		// back over the second ops's once it is done (a walk).
		{"an earlier ops's hooks left in place: not its own", pinnedOverNone(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: opsA}}, "ops-a-uid", opsA), opsB, nil},
		{"an earlier ops's hooks, with upgradePolicy set since: none is its own", pinnedOverNone(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: opsA, UpgradePolicy: direct}}, "ops-a-uid", opsA), opsB, &KeptLifecycle{Written: opsB}},
		{"edited since that ops pinned them: the edit is its own", pinnedOverNone(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: edited}}, "ops-a-uid", opsA), opsB, &KeptLifecycle{Own: edited, Written: opsB}},
		{"pinned by a direct attempt: the sandbox's own", pinnedBy(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: own}}, DirectAttemptPrefix+"abc-3", own), opsB, &KeptLifecycle{Own: own, Written: opsB}},
		// Its own hooks equal the ops's (guide 000's in both): that ops kept
		// nothing, as they were already the sandbox's, and pinned them not
		// over none: they stay its own (a review: they were lost, and a
		// later direct upgrade ran no backup).
		{"own hooks equal to the last ops's: still its own", pinnedBy(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: own, UpgradePolicy: direct}}, "ops-a-uid", own), opsB, &KeptLifecycle{Own: own, Written: opsB}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value := KeepOwnLifecycle(tc.sb, tc.written)
			if tc.want == nil {
				if value != "" {
					t.Fatalf("kept %s, want nothing", value)
				}
				return
			}
			got, ok := keptLifecycle(withKept(&agentsv1alpha1.Sandbox{}, value))
			if !ok || !equality.Semantic.DeepEqual(got, *tc.want) {
				t.Fatalf("kept %s, want %+v", value, *tc.want)
			}
		})
	}
}

func TestOwnLifecycleBack(t *testing.T) {
	own, opsA := hooks("own"), hooks("a")
	kept := KeepOwnLifecycle(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: own}}, opsA)
	keptNone := KeepOwnLifecycle(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{UpgradePolicy: &agentsv1alpha1.SandboxUpgradePolicy{}}}, opsA)
	for _, tc := range []struct {
		name                   string
		sb                     *agentsv1alpha1.Sandbox
		want                   *agentsv1alpha1.SandboxLifecycle
		wantRestore, wantThere bool
	}{
		{"none kept", &agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: opsA}}, nil, false, false},
		{"still the ops's: its own goes back", withKept(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: hooks("a")}}, kept), own, true, true},
		{"still the ops's, none of its own: removed", withKept(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: hooks("a")}}, keptNone), nil, true, true},
		{"changed since: stays", withKept(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: hooks("mine now")}}, kept), nil, false, true},
		{"cannot be read: stays", withKept(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: opsA}}, "x"), nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, restore, present, _ := OwnLifecycleBack(tc.sb)
			if present != tc.wantThere || restore != tc.wantRestore || !equality.Semantic.DeepEqual(got, tc.want) {
				t.Fatalf("OwnLifecycleBack = %+v, %v, %v; want %+v, %v, %v", got, restore, present, tc.want, tc.wantRestore, tc.wantThere)
			}
		})
	}
}

func TestOwnLifecycleDue(t *testing.T) {
	ended := func(string) bool { return false }
	runs := func(string) bool { return true }
	attempt := func(reason string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{}
		sb.Status.Conditions = []metav1.Condition{
			{Type: ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: "uid-1"},
			{Type: agentsv1alpha1.ConditionUpgrading, Status: agentsv1alpha1.UpgradingConditionStatus(reason), Reason: reason},
		}
		return sb
	}
	labelled := func(sb *agentsv1alpha1.Sandbox) *agentsv1alpha1.Sandbox {
		sb.Labels = map[string]string{agentsv1alpha1.LabelUpdateOps: "ops"}
		return sb
	}
	claimedSince := labelled(attempt(agentsv1alpha1.UpgradingReasonSucceeded))
	claimedSince.Annotations = map[string]string{AnnotationClaim: "ops uid-2"}
	claimedAsShown := labelled(attempt(agentsv1alpha1.UpgradingReasonSucceeded))
	claimedAsShown.Annotations = map[string]string{AnnotationClaim: "ops uid-1"}
	unlabelledClaim := attempt(agentsv1alpha1.UpgradingReasonSucceeded)
	unlabelledClaim.Annotations = map[string]string{AnnotationClaim: "ops uid-0"}
	deleting := attempt(agentsv1alpha1.UpgradingReasonSucceeded)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, tc := range []struct {
		name  string
		sb    *agentsv1alpha1.Sandbox
		holds func(string) bool
		want  bool
	}{
		{"succeeded, its ops ended", labelled(attempt(agentsv1alpha1.UpgradingReasonSucceeded)), ended, true},
		{"succeeded, released", attempt(agentsv1alpha1.UpgradingReasonSucceeded), runs, true},
		{"no attempt recorded, claimed by no ops", &agentsv1alpha1.Sandbox{}, runs, true},
		{"succeeded, its ops still runs (or another claimed it)", labelled(attempt(agentsv1alpha1.UpgradingReasonSucceeded)), runs, false},
		{"in a stage", attempt(agentsv1alpha1.UpgradingReasonPostUpgrade), ended, false},
		{"failed: kept for the ops that resumes it", labelled(attempt(agentsv1alpha1.UpgradingReasonPostUpgradeFailed)), ended, false},
		{"being deleted", deleting, ended, false},
		{"claimed by an ended ops whose attempt is not shown yet", claimedSince, ended, false},
		{"claimed by an ended ops whose attempt succeeded", claimedAsShown, ended, true},
		{"an ended ops's claim left behind a direct upgrade since (no label)", unlabelledClaim, ended, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OwnLifecycleDue(tc.sb, tc.holds); got != tc.want {
				t.Fatalf("OwnLifecycleDue = %v, want %v", got, tc.want)
			}
		})
	}
}

// pinnedBy is sb with AnnotationAttemptHooks fixing lifecycle for attempt.
func pinnedBy(sb *agentsv1alpha1.Sandbox, attempt string, lifecycle *agentsv1alpha1.SandboxLifecycle) *agentsv1alpha1.Sandbox {
	if sb.Annotations == nil {
		sb.Annotations = map[string]string{}
	}
	sb.Annotations[AnnotationAttemptHooks] = AttemptHooksValue(attempt, lifecycle)
	return sb
}

// pinnedOverNone is sb with AnnotationAttemptHooks as an ops's attempt that
// wrote lifecycle over no hooks of the sandbox's own leaves it.
func pinnedOverNone(sb *agentsv1alpha1.Sandbox, attempt string, lifecycle *agentsv1alpha1.SandboxLifecycle) *agentsv1alpha1.Sandbox {
	if sb.Annotations == nil {
		sb.Annotations = map[string]string{}
	}
	sb.Annotations[AnnotationAttemptHooks] = OpsAttemptHooksValue(&agentsv1alpha1.Sandbox{}, attempt, lifecycle)
	return sb
}

// The pin an ops's attempt writes says OverNone only when the sandbox has no
// hooks of its own: none at all, or an earlier ops's written over none.
func TestOpsAttemptHooksOverNone(t *testing.T) {
	own, opsA, opsB := hooks("own"), hooks("a"), hooks("b")
	for _, tc := range []struct {
		name string
		sb   *agentsv1alpha1.Sandbox
		want bool
	}{
		{"no hooks", &agentsv1alpha1.Sandbox{}, true},
		{"hooks of its own", &agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: own}}, false},
		{"an earlier ops's over none", pinnedOverNone(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: opsA}}, "ops-a-uid", opsA), true},
		{"an earlier ops's, equal to its own", pinnedBy(&agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: opsA}}, "ops-a-uid", opsA), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pinned AttemptHooks
			if err := json.Unmarshal([]byte(OpsAttemptHooksValue(tc.sb, "ops-b-uid", opsB)), &pinned); err != nil {
				t.Fatal(err)
			}
			if pinned.OverNone != tc.want || pinned.Attempt != "ops-b-uid" || !equality.Semantic.DeepEqual(pinned.Lifecycle, opsB) {
				t.Errorf("pin %+v, want OverNone %v", pinned, tc.want)
			}
		})
	}
}
