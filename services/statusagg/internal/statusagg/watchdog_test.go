package statusagg

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	agentslisters "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const d = 10 * time.Second
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name string
		now  time.Time
		done drives
		want int
		// watching is when this process began to watch (t0 when zero).
		watching time.Time
	}{
		{"within the deadline", at(9), drives{}, verdictWait, time.Time{}},
		{"a deadline after entering: re-drive 1", at(10), drives{}, verdictRedrive, time.Time{}},
		{"a deadline after re-drive 1: re-drive 2", at(20), drives{n: 1, last: at(10)}, verdictRedrive, time.Time{}},
		{"within the deadline of re-drive 1", at(19), drives{n: 1, last: at(10)}, verdictWait, time.Time{}},
		{"a deadline after the last re-drive: fail", at(30), drives{n: 2, last: at(20)}, verdictFail, time.Time{}},
		{"within the deadline of the last re-drive", at(29), drives{n: 2, last: at(20)}, verdictWait, time.Time{}},
		// A new leader, a restarted or a resumed statusagg finds a stage entered many
		// deadlines ago that it never re-drove: the old leader may hold its input. It
		// re-drives first and never fails it at once.
		{"entered long ago, never re-driven here: re-drive, not fail", at(100), drives{}, verdictRedrive, at(100)},
		{"entered long ago, re-driven once here just now", at(101), drives{n: 1, last: at(100)}, verdictWait, at(100)},
		{"entered long ago, re-driven twice here, a deadline ago", at(120), drives{n: 2, last: at(110)}, verdictFail, at(100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			watching := tc.watching
			if watching.IsZero() {
				watching = t0
			}
			if got := judge(tc.now, t0, d, tc.done, 2, watching, false); got != tc.want {
				t.Fatalf("judge = %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("no re-drives allowed: fail a deadline after entering", func(t *testing.T) {
		if got := judge(at(10), t0, d, drives{}, 0, t0, false); got != verdictFail {
			t.Fatalf("judge = %d, want fail", got)
		}
	})
	// Whether the input is still queued could not be told (a NATS error in this
	// check): re-driven as before, never failed for it.
	t.Run("uncertain: re-drive", func(t *testing.T) {
		if got := judge(at(10), t0, d, drives{}, 2, t0, true); got != verdictRedrive {
			t.Fatalf("judge = %d, want re-drive", got)
		}
	})
	t.Run("uncertain, re-driven as often as allowed: wait, not fail", func(t *testing.T) {
		if got := judge(at(30), t0, d, drives{n: 2, last: at(20)}, 2, t0, true); got != verdictWait {
			t.Fatalf("judge = %d, want wait", got)
		}
	})
	// Re-drives that cannot be published do not count: given up on after
	// redrives+giveUpAfter deadlines of this process's watch, so the stage ends.
	t.Run("never re-driven (NATS down), watched long enough: give up", func(t *testing.T) {
		if got := judge(at(49), t0, d, drives{}, 2, t0, false); got != verdictRedrive {
			t.Fatalf("judge at 49s = %d, want re-drive", got)
		}
		if got := judge(at(50), t0, d, drives{}, 2, t0, true); got != verdictGiveUp {
			t.Fatalf("judge at 50s = %d, want give up", got)
		}
	})
	t.Run("a new leader does not give up on a stage entered long ago", func(t *testing.T) {
		if got := judge(at(1000), t0, d, drives{}, 2, at(990), false); got != verdictRedrive {
			t.Fatalf("judge = %d, want re-drive", got)
		}
	})
}

// The watchdog forgets the stages that are no longer in progress, and keeps
// what it knows of the others.
func TestWatchdogForgetsEndedStages(t *testing.T) {
	w := &watchdog{driven: map[string]drives{"ended": {n: 1}, "live": {n: 2}}, queuedSeen: map[string]time.Time{"ended": {}, "live": {}},
		lastWhere: map[string]string{"ended": "x", "live": "y"}}
	w.forgetAllBut(map[string]bool{"live": true})
	if len(w.driven) != 1 || w.driven["live"].n != 2 || len(w.queuedSeen) != 1 || len(w.lastWhere) != 1 {
		t.Fatalf("driven %v, queuedSeen %v, lastWhere %v; want only the live stage's", w.driven, w.queuedSeen, w.lastWhere)
	}
}

// A stage given up on names where its input was last seen waiting, so a service that
// takes nothing is named, and does not speak of publishes that did not fail.
func TestGivenUpNamesTheWaitingConsumer(t *testing.T) {
	w := &watchdog{cfg: Deadlines{Redrives: 2}, lastWhere: map[string]string{"k": "patched (stream sequence 12) is being handled at consumer hookrunner since 2026-12-05T10:00:00Z"}}
	if got := w.givenUp("k", 2); !strings.Contains(got, "consumer hookrunner") || strings.Contains(got, "could not be published") {
		t.Errorf("givenUp = %q, want the consumer named and no publish failure", got)
	}
	if got := w.givenUp("other", 1); !strings.Contains(got, "1 of 2") || !strings.Contains(got, "reach NATS") {
		t.Errorf("givenUp without a place = %q, want the publish doubt and NATS", got)
	}
}

// A re-driven UpgradePod names the pod this attempt did not build, as the prehook-done
// it stands in for did: a pod a failed attempt it continues left behind, so the
// podcycler replaces that pod instead of taking it for the new one, and the original pod
// (whatever earlier attempt built or kept it), so the podcycler keeps it when it already
// runs the target (a rollback) instead of adopting it as a new pod. It names no pod when
// the pod is this attempt's own (built or kept) or there is none.
func TestRedriveEventNamesTheFailedAttemptsPod(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "box", UID: "sb-uid",
		Annotations: map[string]string{upgrade.AnnotationResumes: upgrade.ResumesValue("a2", "a1", agentsv1alpha1.UpgradingReasonPostUpgradeFailed)},
	}}
	podBy := func(uid types.UID, attempt string) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", UID: uid}}
		if attempt != "" {
			pod.Annotations = map[string]string{upgrade.AnnotationPodAttempt: attempt}
		}
		return pod
	}
	keptBy := func(uid types.UID, attempt string) *corev1.Pod {
		pod := podBy(uid, attempt)
		pod.Annotations[upgrade.AnnotationPodKept] = attempt
		return pod
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want types.UID
	}{
		{"the failed attempt's pod", podBy("p1", "a1"), "p1"},
		{"this attempt's pod", podBy("p2", "a2"), ""},
		{"an original pod this attempt kept", keptBy("p2", "a2"), ""},
		{"the original pod, that no attempt built", podBy("p3", ""), "p3"},
		{"the original pod, built by an earlier attempt that succeeded", podBy("p4", "a0"), "p4"},
		{"the original pod, kept by the failed attempt", keptBy("p5", "a1"), "p5"},
		{"no pod", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, ok := redriveEvent(sb, tc.pod, "a2", nil, agentsv1alpha1.UpgradingReasonUpgradePod, 1)
			if !ok || ev.Type != events.TypePreHookDone {
				t.Fatalf("event %q ok=%t, want %q", ev.Type, ok, events.TypePreHookDone)
			}
			if ev.Data.OldPodUID != tc.want || ev.Data.ResumedAttempt != "a1" || ev.Data.Redrive != 1 {
				t.Fatalf("OldPodUID %q, ResumedAttempt %q, Redrive %d; want %q, a1, 1", ev.Data.OldPodUID, ev.Data.ResumedAttempt, ev.Data.Redrive, tc.want)
			}
		})
	}
	t.Run("postUpgrade without this upgrade's pod", func(t *testing.T) {
		if _, ok := redriveEvent(sb, podBy("p3", ""), "a2", nil, agentsv1alpha1.UpgradingReasonPostUpgrade, 1); ok {
			t.Fatal("a pod-ready for a pod no attempt of this upgrade built")
		}
	})
	t.Run("postUpgrade on this upgrade's pod, its checkpoint not restored", func(t *testing.T) {
		pod := podBy("p2", "a2")
		pod.Annotations[upgrade.AnnotationRestoreFrom] = "ckpt-1"
		if _, ok := redriveEvent(sb, pod, "a2", nil, agentsv1alpha1.UpgradingReasonPostUpgrade, 1); ok {
			t.Fatal("a pod-ready for a pod whose checkpoint was never restored: postUpgrade would run on an empty workspace")
		}
		pod.Annotations[upgrade.AnnotationRestored] = "ckpt-1"
		if ev, ok := redriveEvent(sb, pod, "a2", nil, agentsv1alpha1.UpgradingReasonPostUpgrade, 1); !ok || ev.Type != events.TypePodReady {
			t.Fatalf("restored pod: event %q ok=%t, want %q", ev.Type, ok, events.TypePodReady)
		}
	})
}

// Stalled stages whose re-drive NATS refused are said on their ops (a direct
// attempt's sandbox), once per busWarnEvery: the status alone cannot tell a
// hung hook from a broken stream.
func TestStreamUnreachableIsSaidOnTheOps(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	w := &watchdog{s: &server{recorder: rec}, now: func() time.Time { return now }}
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "ops-1"}}
	sb := func(name string) *agentsv1alpha1.Sandbox {
		return &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
	}
	cause := errors.New("publish failed: nats: connection reconnecting")
	check := func() map[types.UID]*busStall {
		m := map[types.UID]*busStall{}
		m = addBusStall(m, ops, sb("box-1"))
		m = addBusStall(m, ops, sb("box-0"))
		return addBusStall(m, nil, sb("direct-0"))
	}
	w.warnBusDown(check(), cause)
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(got) != 2 {
		t.Fatalf("events %q, want one on the ops and one on the direct attempt's sandbox", got)
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"Warning StreamUnreachable 2 sandboxes are past their stage's deadline (box-0, box-1)", "1 sandbox is past", "connection reconnecting", "nothing is lost", "failed all the same"} {
		if !strings.Contains(all, want) {
			t.Errorf("events %q lack %q", got, want)
		}
	}
	now = now.Add(busWarnEvery / 2)
	w.warnBusDown(check(), cause)
	if len(rec.Events) != 0 {
		t.Errorf("warned again within %s: %q", busWarnEvery, <-rec.Events)
	}
	now = now.Add(busWarnEvery)
	w.warnBusDown(check(), cause)
	if len(rec.Events) != 2 {
		t.Errorf("%d events after %s, want each warned again", len(rec.Events), busWarnEvery)
	}
}

// The watchdog drives a stalled stage of a sandbox whose update-ops label was
// removed mid-attempt through the ops its claim annotation names (the ops is
// deleting or the selector has not put the label back yet), instead of
// failing it at once as no longer claimed.
func TestDriverOfASandboxThatLostItsLabel(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "u-1"}}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := indexer.Add(ops); err != nil {
		t.Fatal(err)
	}
	w := &watchdog{s: &server{ops: agentslisters.NewSandboxUpdateOpsLister(indexer)}}
	sandboxIn := func(attempt, claim, reason string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sb", Namespace: "ns", Annotations: map[string]string{upgrade.AnnotationClaim: claim}}}
		sb.Status.Conditions = []metav1.Condition{
			{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: attempt},
			{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
		}
		return sb
	}
	sandbox := func(claim, reason string) *agentsv1alpha1.Sandbox { return sandboxIn("u-1", claim, reason) }
	if got, why := w.driver(sandbox(upgrade.ClaimValue("up", "u-1"), agentsv1alpha1.UpgradingReasonUpgradePod), "u-1"); got != ops || why != "" {
		t.Errorf("driver of an unlabelled sandbox claimed for the attempt = %v, %q; want ops up", got, why)
	}
	if got, why := w.driver(sandbox(upgrade.ClaimValue("up", "u-0"), agentsv1alpha1.UpgradingReasonUpgradePod), "u-1"); got != nil || why == "" {
		t.Errorf("driver of an unlabelled sandbox claimed for another attempt = %v, %q; want no longer claimed", got, why)
	}
	// The claim wiped with the label (a replace of an older manifest): the
	// ops whose uid the attempt is drives it, while there is one.
	if got, why := w.driver(sandbox("", agentsv1alpha1.UpgradingReasonUpgradePod), "u-1"); got != ops || why != "" {
		t.Errorf("driver of an unlabelled, unclaimed sandbox in a stage of ops up's attempt = %v, %q; want ops up", got, why)
	}
	if got, why := w.driver(sandboxIn("u-9", "", agentsv1alpha1.UpgradingReasonUpgradePod), "u-9"); got != nil || why == "" {
		t.Errorf("driver of an unlabelled, unclaimed sandbox of an attempt no ops has = %v, %q; want no longer claimed", got, why)
	}
}

// A PreUpgrade the watchdog fails says the old pod is untouched only while
// the sandbox has one: a pod deleted meanwhile may have taken the mark of a
// backup with it, and the resume may back the next pod up over it.
func TestMissingPreUpgradeSaysWhetherThePodIsThere(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "sb"}}
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	w := &watchdog{s: &server{pods: corelisters.NewPodLister(pods)}}
	if got := w.missing(sb, agentsv1alpha1.UpgradingReasonPreUpgrade); !strings.Contains(got, "the sandbox has no pod now") || strings.Contains(got, "untouched") {
		t.Errorf("no pod: %q, want it to say there is none", got)
	}
	controller := true
	if err := pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns",
		OwnerReferences: []metav1.OwnerReference{{Kind: "Sandbox", Name: "box", UID: "sb", Controller: &controller}}}}); err != nil {
		t.Fatal(err)
	}
	if got := w.missing(sb, agentsv1alpha1.UpgradingReasonPreUpgrade); !strings.Contains(got, "the old pod is untouched") {
		t.Errorf("with its pod: %q, want the old pod untouched", got)
	}
}

// A re-drive's StageStalled Event names the consumer whose service takes
// the stage's input (a walk found it said only what was published again).
func TestStageHandledByNamesTheConsumer(t *testing.T) {
	for stage, want := range map[string]string{
		agentsv1alpha1.UpgradingReasonPreUpgrade:    "MOLT_EVENTS patcher` (then `hookrunner`",
		agentsv1alpha1.UpgradingReasonResuming:      "MOLT_EVENTS patcher`",
		agentsv1alpha1.UpgradingReasonUpgradePod:    "MOLT_EVENTS podcycler`",
		agentsv1alpha1.UpgradingReasonCheckpointing: "MOLT_EVENTS podcycler`",
		agentsv1alpha1.UpgradingReasonPostUpgrade:   "MOLT_EVENTS hookrunner-post`",
	} {
		if got := stageHandledBy(&agentsv1alpha1.Sandbox{}, stage); !strings.Contains(got, want) {
			t.Errorf("stageHandledBy(%s) = %q; want it to name %q", stage, got, want)
		}
	}
}

// A PreUpgrade that stalls after the patcher patched the sandbox for the
// attempt waits on hookrunner: its Event and failure name hookrunner's
// consumer, not the patcher's (a walk with hookrunner down was sent to the
// patcher's empty consumer first).
func TestStalledPreUpgradeAfterThePatchNamesHookrunner(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sbx", Namespace: "ns", Annotations: map[string]string{
		upgrade.AnnotationAttemptHooks: upgrade.AttemptHooksValue("ops-uid", nil)}}}
	sb.Status.Conditions = []metav1.Condition{{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.UpgradingReasonPreUpgrade, Message: "ops-uid"}}
	if got := stageHandledBy(sb, agentsv1alpha1.UpgradingReasonPreUpgrade); !strings.Contains(got, "nats consumer info MOLT_EVENTS hookrunner`") {
		t.Errorf("stageHandledBy of a patched sandbox = %q, want hookrunner's consumer first", got)
	}
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	w := &watchdog{s: &server{pods: corelisters.NewPodLister(pods)}}
	if got := w.missing(sb, agentsv1alpha1.UpgradingReasonPreUpgrade); !strings.Contains(got, "check hookrunner's log and `nats consumer info MOLT_EVENTS hookrunner`") {
		t.Errorf("missing of a patched sandbox = %q, want hookrunner's consumer first", got)
	}
	sb.Annotations[upgrade.AnnotationAttemptHooks] = upgrade.AttemptHooksValue("an-older-attempt", nil)
	if got := w.missing(sb, agentsv1alpha1.UpgradingReasonPreUpgrade); !strings.Contains(got, "MOLT_EVENTS patcher`") {
		t.Errorf("missing of a sandbox not patched for its attempt = %q, want the patcher's consumer", got)
	}
}
