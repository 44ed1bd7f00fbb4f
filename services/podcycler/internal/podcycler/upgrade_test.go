package podcycler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

const (
	testOps     = "ops1"
	testAttempt = "uid-1"
)

// upgradeRun is one sandbox taken through the upgrade up to prehook-done, as the selector,
// patcher, hookrunner and statusagg would: a running pod, the ops label, the patched
// template, a status that describes the attempt.
type upgradeRun struct {
	ns, name string
	sandbox  *agentsv1alpha1.Sandbox
	oldPod   *corev1.Pod
	target   string
	prehook  events.Event
	bus      *bus
	pods     *podCreations
}

// startUpgrade creates a running sandbox, labels it with the ops, patches its template
// with mutate and writes a status in UpgradePod; it does not publish prehook-done yet.
func startUpgrade(t *testing.T, name string, mutate func(*corev1.PodSpec)) *upgradeRun {
	t.Helper()
	env := testenv.Get(t)
	r := &upgradeRun{ns: env.Namespace(t), name: name, bus: connectBus(t)}
	sb := createSandbox(t, r.ns, name, "registry.example/sandbox:v1")
	r.oldPod = waitPodReady(t, r.ns, name, "")
	r.pods = watchPodCreations(t, r.ns)

	r.sandbox = updateSandbox(t, r.ns, sb.Name, func(s *agentsv1alpha1.Sandbox) {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[agentsv1alpha1.LabelUpdateOps] = testOps
		mutate(&s.Spec.Template.Spec)
	})
	setUpgradeStatus(t, r.ns, name, testAttempt, agentsv1alpha1.UpgradingReasonUpgradePod)
	var err error
	if r.target, err = upgrade.Revision(r.sandbox.Spec.Template); err != nil {
		t.Fatal(err)
	}
	r.prehook = events.Event{Type: events.TypePreHookDone, Data: events.Data{
		Ops:            events.OpsRef{Name: testOps, UID: types.UID(testAttempt)},
		Sandbox:        events.SandboxRef{Namespace: r.ns, Name: name, UID: sb.UID},
		Attempt:        testAttempt,
		TargetRevision: r.target,
		OldPodUID:      r.oldPod.UID,
	}}
	return r
}

func (r *upgradeRun) publishPreHookDone(t *testing.T) {
	t.Helper()
	if err := r.bus.publisher.Publish(context.Background(), r.prehook); err != nil {
		t.Fatalf("publish prehook-done: %v", err)
	}
}

// The pod is replaced exactly once with one of the patched template, pod-ready follows,
// and a redelivered prehook-done replaces nothing.
func TestUpgradeRecreatesPodOnceAndReportsReady(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-up", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/sandbox:v2" })
	started := r.bus.subscribe(t, r.ns, r.name, events.TokenStageStarted)
	ready := r.bus.subscribe(t, r.ns, r.name, events.TokenPodReady)
	r.publishPreHookDone(t)

	ev := next(t, ready, "pod-ready", 60*time.Second)
	pod := waitPodReady(t, r.ns, r.name, string(r.oldPod.UID))
	switch {
	case ev.Data.Attempt != testAttempt || ev.Data.Ops.Name != testOps || ev.Data.Ops.UID != testAttempt:
		t.Errorf("pod-ready ops/attempt = %+v / %q", ev.Data.Ops, ev.Data.Attempt)
	case ev.Data.NewPodUID != pod.UID:
		t.Errorf("pod-ready newPodUID = %s, want %s", ev.Data.NewPodUID, pod.UID)
	case ev.Data.Sandbox.UID != r.sandbox.UID:
		t.Errorf("pod-ready sandbox = %+v", ev.Data.Sandbox)
	}
	if got := pod.Spec.Containers[0].Image; got != "registry.example/sandbox:v2" {
		t.Errorf("new pod image = %q, want v2", got)
	}
	if got := pod.Labels[agentsv1alpha1.LabelPodTemplateHash]; got != r.target {
		t.Errorf("new pod pod-template-hash = %q, want %q", got, r.target)
	}
	if got := pod.Annotations[upgrade.AnnotationPodAttempt]; got != testAttempt {
		t.Errorf("new pod %s = %q, want %q", upgrade.AnnotationPodAttempt, got, testAttempt)
	}
	if got := r.pods.of(r.name); len(got) != 1 || got[0] != string(pod.UID) {
		t.Fatalf("pods created for the upgrade = %v, want exactly [%s]", got, pod.UID)
	}
	if st := next(t, started, "stage-started", 5*time.Second); st.Data.Stage != agentsv1alpha1.UpgradingReasonUpgradePod {
		t.Errorf("stage-started stage = %q, want UpgradePod", st.Data.Stage)
	}

	// Redelivery: the same prehook-done handled a second time changes nothing.
	seq := r.bus.redeliver(t, r.prehook)
	r.bus.waitHandled(t, seq)
	if got := r.pods.of(r.name); len(got) != 1 {
		t.Fatalf("pods created after redelivery = %v, want still exactly one", got)
	}
	if again := waitPodReady(t, r.ns, r.name, string(r.oldPod.UID)); again.UID != pod.UID {
		t.Fatalf("pod replaced again on redelivery: %s → %s", pod.UID, again.UID)
	}
}

// A pod that already runs the target template (a rollback ops set the template of a
// sandbox whose upgrade failed before its pod was replaced back to what the pod runs)
// is kept, with its files, and reported ready: nothing is deleted or created.
func TestUpgradeKeepsAPodThatAlreadyRunsTheTarget(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-same", func(*corev1.PodSpec) {})
	if got := r.oldPod.Labels[agentsv1alpha1.LabelPodTemplateHash]; got != r.target {
		t.Fatalf("old pod revision %q, want the target %q for this test", got, r.target)
	}
	started := r.bus.subscribe(t, r.ns, r.name, events.TokenStageStarted)
	ready := r.bus.subscribe(t, r.ns, r.name, events.TokenPodReady)
	r.publishPreHookDone(t)

	ev := next(t, ready, "pod-ready", 60*time.Second)
	if ev.Data.NewPodUID != r.oldPod.UID || ev.Data.Attempt != testAttempt {
		t.Fatalf("pod-ready for pod %s of attempt %q, want the old pod %s of %q", ev.Data.NewPodUID, ev.Data.Attempt, r.oldPod.UID, testAttempt)
	}
	pod := waitPodReady(t, r.ns, r.name, "")
	if pod.UID != r.oldPod.UID {
		t.Fatalf("pod replaced: %s → %s", r.oldPod.UID, pod.UID)
	}
	if pod.Annotations[upgrade.AnnotationPodKept] != testAttempt || upgrade.NewPodOf(pod, testAttempt) {
		t.Fatalf("kept pod annotations %v: want it marked kept by %s, not a new pod of it", pod.Annotations, testAttempt)
	}
	if got := r.pods.of(r.name); len(got) != 0 {
		t.Fatalf("pods created = %v, want none", got)
	}
	select {
	case st := <-started:
		t.Fatalf("stage-started %s published, want none: the pod was not replaced", st.Data.Stage)
	default:
	}
}

// A watchdog re-drive of UpgradePod that names no old pod (a statusagg whose pod cache
// showed none, or one from before re-drives named the original pod) does not make the
// original pod of a rollback this attempt's new pod: it is kept, marked kept, with its
// files, as when the prehook-done names it. Adopted as a new pod, a resume after a failed
// postUpgrade would skip its backup and restore an older one over its live files.
func TestRedriveKeepsThePodThatAlreadyRunsTheTarget(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-redrive-same", func(*corev1.PodSpec) {})
	if got := r.oldPod.Labels[agentsv1alpha1.LabelPodTemplateHash]; got != r.target {
		t.Fatalf("old pod revision %q, want the target %q for this test", got, r.target)
	}
	started := r.bus.subscribe(t, r.ns, r.name, events.TokenStageStarted)
	ready := r.bus.subscribe(t, r.ns, r.name, events.TokenPodReady)
	r.prehook.Data.OldPodUID, r.prehook.Data.Redrive = "", 1
	r.publishPreHookDone(t)

	ev := next(t, ready, "pod-ready", 60*time.Second)
	if ev.Data.NewPodUID != r.oldPod.UID || ev.Data.Redrive != 1 {
		t.Fatalf("pod-ready for pod %s, re-drive %d; want the old pod %s, re-drive 1", ev.Data.NewPodUID, ev.Data.Redrive, r.oldPod.UID)
	}
	pod := waitPodReady(t, r.ns, r.name, "")
	if pod.UID != r.oldPod.UID {
		t.Fatalf("pod replaced: %s → %s", r.oldPod.UID, pod.UID)
	}
	if pod.Annotations[upgrade.AnnotationPodKept] != testAttempt || upgrade.NewPodOf(pod, testAttempt) {
		t.Fatalf("pod annotations after the re-drive %v: want it marked kept by %s, not a new pod of it", pod.Annotations, testAttempt)
	}
	// What a resume after a failed postUpgrade would decide on it: back it up again.
	if at := upgrade.ResumeAt(agentsv1alpha1.UpgradingReasonPostUpgradeFailed, []string{testAttempt}, pod, r.target); at != agentsv1alpha1.UpgradingReasonPreUpgrade {
		t.Fatalf("a resume after a failed postUpgrade would continue from %s, want PreUpgrade (the pod holds the workspace)", at)
	}
	if got := r.pods.of(r.name); len(got) != 0 {
		t.Fatalf("pods created = %v, want none", got)
	}
	select {
	case st := <-started:
		t.Fatalf("stage-started %s published, want none: the pod was not replaced", st.Data.Stage)
	default:
	}
}

// A new image that cannot be pulled fails the upgrade with the container's reason.
func TestUpgradeReportsImagePullFailure(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-pull", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/sandbox:non-existent" })
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	r.publishPreHookDone(t)

	ev := next(t, failed, "failed", 60*time.Second)
	assertUpgradePodFailed(t, ev, "container main: ErrImagePull - ", "container main: ImagePullBackOff - ")
	if got := r.pods.of(r.name); len(got) != 1 {
		t.Fatalf("pods created for the upgrade = %v, want exactly one", got)
	}
}

// A new image that crashes fails the upgrade with CrashLoopBackOff.
func TestUpgradeReportsCrashLoop(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-crash", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/sandbox:crash" })
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	r.publishPreHookDone(t)

	ev := next(t, failed, "failed", 60*time.Second)
	assertUpgradePodFailed(t, ev, "container main: CrashLoopBackOff - ")
}

// A new pod that never becomes Ready fails the upgrade at --pod-ready-timeout, saying
// what it waits for.
func TestUpgradeReportsReadyDeadline(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-late", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"molt.dev/no-such-node": "true"} })
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	r.publishPreHookDone(t)

	ev := next(t, failed, "failed", 60*time.Second)
	assertUpgradePodFailed(t, ev, fmt.Sprintf("pod sbx-late not Ready after %s: not scheduled", readyTimeout))
}

func assertUpgradePodFailed(t *testing.T, ev events.Event, prefixes ...string) {
	t.Helper()
	if ev.Data.Reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed || ev.Data.Stage != agentsv1alpha1.UpgradingReasonUpgradePod {
		t.Errorf("failed reason/stage = %q/%q, want UpgradePodFailed/UpgradePod", ev.Data.Reason, ev.Data.Stage)
	}
	if ev.Data.Attempt != testAttempt {
		t.Errorf("failed attempt = %q", ev.Data.Attempt)
	}
	for _, p := range prefixes {
		if strings.HasPrefix(ev.Data.Message, p) {
			return
		}
	}
	t.Errorf("failed message = %q, want a prefix in %q", ev.Data.Message, prefixes)
}

// A pod missing while the status says UpgradePod, with no handler at work (it died after
// the delete), is left to the handler for --upgrade-pod-grace, then created by the
// lifecycle loop as the stage would build it: target revision, this attempt.
func TestMissingPodUnderUpgradePodWaitsForTheHandlerThenIsCreated(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-orphan", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/sandbox:v2" })
	setUpgradeStatus(t, r.ns, r.name, testAttempt, agentsv1alpha1.UpgradingReasonUpgradePod)

	deleted := time.Now()
	if err := testenv.Get(t).Kube.CoreV1().Pods(r.ns).Delete(context.Background(), r.name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete old pod: %v", err)
	}
	pod := waitPodReady(t, r.ns, r.name, string(r.oldPod.UID))
	// creationTimestamp has whole seconds: the pod came at deleted+grace at the earliest.
	if earliest := deleted.Add(handlerGrace - time.Second); pod.CreationTimestamp.Time.Before(earliest) {
		t.Errorf("pod created at %s, before the handler's grace ran out (deleted %s, grace %s)",
			pod.CreationTimestamp.Format(time.RFC3339), deleted.Format(time.RFC3339Nano), handlerGrace)
	}
	if got := pod.Annotations[upgrade.AnnotationPodAttempt]; got != testAttempt {
		t.Errorf("pod %s = %q, want %q", upgrade.AnnotationPodAttempt, got, testAttempt)
	}
	if got := pod.Labels[agentsv1alpha1.LabelPodTemplateHash]; got != r.target {
		t.Errorf("pod pod-template-hash = %q, want %q", got, r.target)
	}
	if got := r.pods.of(r.name); len(got) != 1 {
		t.Errorf("pods created = %v, want exactly one", got)
	}
}

// A watchdog re-drive is of one attempt: the next attempt on the same sandbox
// reports its outcome with no re-drive number (before, the number stayed
// with the sandbox, and kubectl molt history showed every later attempt as
// re-driven, under message ids of a re-drive).
func TestRedriveNumberStaysWithItsAttempt(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-redrive-next", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/sandbox:v2" })
	ready := r.bus.subscribe(t, r.ns, r.name, events.TokenPodReady)
	r.prehook.Data.Redrive = 1
	r.publishPreHookDone(t)
	if ev := next(t, ready, "pod-ready", 60*time.Second); ev.Data.Redrive != 1 || ev.Data.Attempt != testAttempt {
		t.Fatalf("pod-ready of the re-driven attempt: attempt %s, re-drive %d; want %s, 1", ev.Data.Attempt, ev.Data.Redrive, testAttempt)
	}
	pod := waitPodReady(t, r.ns, r.name, string(r.oldPod.UID))

	const next2 = "attempt-after-the-redrive"
	sb := updateSandbox(t, r.ns, r.name, func(s *agentsv1alpha1.Sandbox) {
		s.Spec.Template.Spec.Containers[0].Image = "registry.example/sandbox:v3"
	})
	setUpgradeStatus(t, r.ns, r.name, next2, agentsv1alpha1.UpgradingReasonUpgradePod)
	target, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	r.prehook.Data.Ops.UID, r.prehook.Data.Attempt, r.prehook.Data.Redrive = types.UID(next2), next2, 0
	r.prehook.Data.TargetRevision, r.prehook.Data.OldPodUID = target, pod.UID
	r.publishPreHookDone(t)
	ev := next(t, ready, "pod-ready", 60*time.Second)
	if ev.Data.Attempt != next2 || ev.Data.Redrive != 0 {
		t.Fatalf("pod-ready of the next attempt: attempt %s, re-drive %d; want %s, 0", ev.Data.Attempt, ev.Data.Redrive, next2)
	}
}
