package statusagg

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/controller"
	"molt.dev/pkg/events"
	agentslisters "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// readSignal is a sandbox lister that says on read each time it is read.
type readSignal struct {
	agentslisters.SandboxLister
	read chan struct{}
}

func (r readSignal) Sandboxes(ns string) agentslisters.SandboxNamespaceLister {
	select {
	case r.read <- struct{}{}:
	default:
	}
	return r.SandboxLister.Sandboxes(ns)
}

// An event handled while a write of its sandbox is in flight is decided
// against the status as it is once that write is done and seen, never
// against a cached copy read before: here the write ends the attempt
// Succeeded, so a late pod-ready must change nothing (the integration test
// UpgradeProgressesAndOpsCompletes saw pod-ready begin the attempt again at
// PostUpgrade over Succeeded, and the sandbox stuck there).
func TestStageDecidesAgainstTheStatusAfterTheWriteInFlight(t *testing.T) {
	const attempt = "ops-uid"
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b2", UID: "sb-uid",
		Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "ops"}}}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := indexer.Add(sb); err != nil {
		t.Fatal(err)
	}
	lister := readSignal{SandboxLister: agentslisters.NewSandboxLister(indexer), read: make(chan struct{}, 1)}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := &server{
		metrics:    m,
		clock:      newStageClock(),
		sandboxes:  lister,
		ops:        agentslisters.NewSandboxUpdateOpsLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})),
		sandboxCtl: controller.New("test", func(context.Context, string) error { return nil }),
		coalesce:   time.Second,
	}
	ev := events.Event{Type: events.TypePodReady, Data: events.Data{Attempt: attempt, Ops: events.OpsRef{Name: "ops"},
		Sandbox: events.SandboxRef{Namespace: "ns", Name: "b2", UID: "sb-uid"}}}

	// The writer holds the sandbox's entry while the event arrives.
	key := ev.SandboxKey()
	e := s.writes.lock(key)
	type result struct {
		out outcome
		w   *waiter
		err error
	}
	res := make(chan result, 1)
	go func() {
		out, w, err := s.stage(context.Background(), ev, false)
		res <- result{out, w, err}
	}()
	// Give a read made before the lock (the old order) the chance to happen.
	select {
	case <-lister.read:
	case <-time.After(200 * time.Millisecond):
	}
	// The write ended the attempt, the informer shows it, and the entry was
	// dropped (syncSandbox does all three while holding it).
	succeeded := sb.DeepCopy()
	recordTransition(&succeeded.Status.Conditions, transition{Attempt: attempt, New: true, To: agentsv1alpha1.UpgradingReasonSucceeded}, 1, metav1.Now())
	if err := indexer.Update(succeeded); err != nil {
		t.Fatal(err)
	}
	s.writes.forget(key, e)
	e.mu.Unlock()

	r := <-res
	if r.err != nil {
		t.Fatalf("stage: %v", r.err)
	}
	if r.w != nil || r.out.skip == "" {
		t.Fatalf("pod-ready after Succeeded was decided as %+v (waiting for a write: %v); want a skip", r.out.tr, r.w != nil)
	}
	if reason, _ := upgrade.ReasonFor(succeeded, attempt); reason != agentsv1alpha1.UpgradingReasonSucceeded {
		t.Fatalf("test setup: reason %q", reason)
	}
}

// One write may carry several events' transitions (pod-ready and
// posthook-done arrive together), and their handlers wake in any order. The
// writer records them in the order they were decided: every stage that ended
// gets its duration (when the success came first, the clock forgot the
// sandbox and PostUpgrade and UpgradePod went unobserved: 481 of 1000
// UpgradePod durations in a 1000-sandbox run), and an attempt's start is
// announced before its end.
func TestRecordWrittenKeepsTheDecidedOrder(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(10)
	s := &server{metrics: m, clock: newStageClock(), recorder: rec, pods: podLister(t)}
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sb", UID: "uid"}}
	const key, attempt = "ns/sb", "a"
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	r := agentsv1alpha1.UpgradingReasonPreUpgrade
	s.recordWritten(key, sb, []*waiter{newWaiter(transition{Attempt: attempt, New: true, To: r}, at(0))})
	s.recordWritten(key, sb, []*waiter{
		newWaiter(transition{Attempt: attempt, From: r, To: agentsv1alpha1.UpgradingReasonUpgradePod}, at(1)),
		newWaiter(transition{Attempt: attempt, From: agentsv1alpha1.UpgradingReasonUpgradePod, To: agentsv1alpha1.UpgradingReasonPostUpgrade}, at(4)),
		newWaiter(transition{Attempt: attempt, From: agentsv1alpha1.UpgradingReasonPostUpgrade, To: agentsv1alpha1.UpgradingReasonSucceeded}, at(6)),
	})
	for stage, want := range map[string]float64{"PreUpgrade": 1, "UpgradePod": 3, "PostUpgrade": 2} {
		h := &dto.Metric{}
		if err := m.stageDuration.WithLabelValues(stage).(prometheus.Metric).Write(h); err != nil {
			t.Fatal(err)
		}
		if n, sum := h.GetHistogram().GetSampleCount(), h.GetHistogram().GetSampleSum(); n != 1 || sum != want {
			t.Errorf("stage %s: %d durations summing %vs, want 1 of %vs", stage, n, sum, want)
		}
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, strings.Fields(e)[1])
	}
	if want := []string{EventUpgradeStarted, EventUpgradeSucceeded}; !slices.Equal(got, want) {
		t.Errorf("Events %v, want %v", got, want)
	}
}

// The UpgradeStarted Event of an attempt that resumes a failed one names the
// failure it resumes and not the stage the selector proposed: the patcher
// decides where it goes on, and "started at PreUpgrade" read as the backup
// running again.
func TestResumedAttemptsStartSaysWhatItResumes(t *testing.T) {
	ev := events.Event{Type: events.TypeRequested, Data: events.Data{Attempt: "b", ResumedAttempt: "a", ResumedReason: agentsv1alpha1.UpgradingReasonUpgradePodFailed,
		Ops: events.OpsRef{Name: "continue"}}}
	tr, skip := decide("a", agentsv1alpha1.UpgradingReasonUpgradePodFailed, ev, agentsv1alpha1.UpgradingReasonPreUpgrade)
	if skip != "" || !tr.New || tr.Resumes != agentsv1alpha1.UpgradingReasonUpgradePodFailed {
		t.Fatalf("decide = %+v (skip %q), want a new attempt resuming UpgradePodFailed", tr, skip)
	}
	rec := record.NewFakeRecorder(10)
	s := &server{recorder: rec}
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sb", Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "continue"}}}
	s.announce(sb, tr)
	fresh := tr
	fresh.Resumes = ""
	s.announce(sb, fresh)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{
		"Normal UpgradeStarted upgrade by SandboxUpdateOps continue started (attempt b), resuming the one that ended in UpgradePodFailed: it goes on from that step (kubectl molt history shows the stages it runs)",
		"Normal UpgradeStarted upgrade by SandboxUpdateOps continue started at PreUpgrade (attempt b)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Events:\n%q\nwant\n%q", got, want)
	}
}

// podLister is a pod lister of pods.
func podLister(t *testing.T, pods ...*corev1.Pod) corelisters.PodLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, pod := range pods {
		if err := idx.Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewPodLister(idx)
}

// An ops's attempt that succeeds on a sandbox whose spec.template was edited
// after the attempt built its pod says so in a Warning Event: the pod does
// not run the template, and nothing rolls the edit out (a walk's edit in
// PostUpgrade ended Succeeded with the drift shown nowhere). Not when the
// pod runs the template, nor when the sandbox upgrades itself.
func TestTemplateEditedDuringTheUpgradeIsTold(t *testing.T) {
	tpl := func(image string) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}
	}
	built, err := upgrade.Revision(tpl("img:v2"))
	if err != nil {
		t.Fatal(err)
	}
	controller := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sb",
		Labels:          map[string]string{agentsv1alpha1.LabelPodTemplateHash: built},
		Annotations:     map[string]string{upgrade.AnnotationPodAttempt: "ops-uid"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Sandbox", Name: "sb", UID: "uid", Controller: &controller}}}}
	for _, tc := range []struct {
		name   string
		image  string
		policy bool
		want   bool
	}{
		{"edited after the pod was built", "img:v9", false, true},
		{"the pod runs the template", "img:v2", false, false},
		{"edited, and the sandbox upgrades itself", "img:v9", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := record.NewFakeRecorder(10)
			s := &server{recorder: rec, pods: podLister(t, pod)}
			sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sb", UID: "uid", Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "up"}}}
			sb.Spec.Template = tpl(tc.image)
			if tc.policy {
				sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
			}
			s.announce(sb, transition{Attempt: "ops-uid", From: agentsv1alpha1.UpgradingReasonPostUpgrade, To: agentsv1alpha1.UpgradingReasonSucceeded})
			close(rec.Events)
			var warned string
			for e := range rec.Events {
				if strings.HasPrefix(e, "Warning "+EventTemplateEditedDuringUpgrade) {
					warned = e
				}
			}
			if (warned != "") != tc.want {
				t.Fatalf("Warning %s: %q, want one: %v", EventTemplateEditedDuringUpgrade, warned, tc.want)
			}
			if tc.want && (!strings.Contains(warned, "pod sb runs revision "+built) || !strings.Contains(warned, "spec.upgradePolicy.type Recreate")) {
				t.Errorf("the Event %q does not say what the pod runs and the way on", warned)
			}
		})
	}
}
