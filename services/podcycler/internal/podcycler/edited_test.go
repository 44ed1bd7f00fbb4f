package podcycler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// undoneRun is an upgrade to v2 whose sandbox template the user then set back to
// v1 (the image the old pod runs), with the ops of that patch in place.
func undoneRun(t *testing.T, name string) *upgradeRun {
	t.Helper()
	r := startUpgrade(t, name, func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/sandbox:v2" })
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: testOps, Namespace: r.ns}}
	ops.Spec.Selector = &metav1.LabelSelector{}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"main","image":"registry.example/sandbox:v2"}]}}`)}
	created, err := agents(t).AgentsV1alpha1().SandboxUpdateOps(r.ns).Create(context.Background(), ops, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ops: %v", err)
	}
	// An ops's attempt is its UID.
	r.prehook.Data.Ops.UID, r.prehook.Data.Attempt = created.UID, string(created.UID)
	setUpgradeStatus(t, r.ns, name, string(created.UID), agentsv1alpha1.UpgradingReasonUpgradePod)
	r.sandbox = updateSandbox(t, r.ns, name, func(s *agentsv1alpha1.Sandbox) {
		s.Spec.Template.Spec.Containers[0].Image = "registry.example/sandbox:v1"
	})
	return r
}

// expectUndone waits for the attempt's UpgradePodFailed, which must say the patch
// was undone and how the pod was left.
func expectUndone(t *testing.T, failed <-chan events.Event, podWords string) {
	t.Helper()
	ev := next(t, failed, "failed", 60*time.Second)
	if ev.Data.Reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed {
		t.Fatalf("failed with %s (%s), want UpgradePodFailed", ev.Data.Reason, ev.Data.Message)
	}
	for _, want := range []string{"no longer carries the patch", "container main is set to registry.example/sandbox:v1 in spec.template, the patch sets registry.example/sandbox:v2", podWords, "kubectl molt retry " + testOps} {
		if !strings.Contains(ev.Data.Message, want) {
			t.Errorf("failure message %q does not say %q", ev.Data.Message, want)
		}
	}
}

// A watchdog re-drive carries the template's revision as it is now, so the
// edit does not show as one on the event: the patch is checked all the same.
// Before, the old pod, which runs the edited template, was kept and reported
// ready, and the sandbox counted as updated to v2 on v1.
func TestRedriveAfterAnEditThatUndidThePatchFails(t *testing.T) {
	startPodcycler(t)
	r := undoneRun(t, "sbx-undone-redrive")
	ready := r.bus.subscribe(t, r.ns, r.name, events.TokenPodReady)
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	current, err := upgrade.Revision(r.sandbox.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	r.prehook.Data.TargetRevision, r.prehook.Data.Redrive = current, 1
	r.publishPreHookDone(t)

	expectUndone(t, failed, "the pod (uid "+string(r.oldPod.UID)+") was not replaced by it")
	select {
	case ev := <-ready:
		t.Fatalf("pod-ready for pod %s: the sandbox would count as updated", ev.Data.NewPodUID)
	default:
	}
	pod := waitPodReady(t, r.ns, r.name, "")
	if pod.UID != r.oldPod.UID || pod.Annotations[upgrade.AnnotationPodAttempt] != "" {
		t.Fatalf("pod %s with annotations %v, want the old pod %s untouched", pod.UID, pod.Annotations, r.oldPod.UID)
	}
}

// The handler deleted the old pod and died. The lifecycle loop, which builds
// the attempt's pod once the handler is taken for dead, does not build it from
// the edit (before, it did, reported it ready, and the sandbox counted as
// updated); the redelivered handler fails the stage.
func TestNoPodIsBuiltFromAnEditThatUndidThePatch(t *testing.T) {
	startPodcycler(t)
	r := undoneRun(t, "sbx-undone-lifecycle")
	ready := r.bus.subscribe(t, r.ns, r.name, events.TokenPodReady)
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	pods := testenv.Get(t).Kube.CoreV1().Pods(r.ns)
	if err := pods.Delete(context.Background(), r.name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete old pod: %v", err)
	}
	// Past the handler's grace, with room for the lifecycle loop to act.
	time.Sleep(3 * handlerGrace)
	if got := r.pods.of(r.name); len(got) != 0 {
		t.Fatalf("pods created = %v while the template no longer carries the patch, want none", got)
	}
	r.publishPreHookDone(t)

	expectUndone(t, failed, "the old pod was already deleted")
	select {
	case ev := <-ready:
		t.Fatalf("pod-ready for pod %s: the sandbox would count as updated", ev.Data.NewPodUID)
	default:
	}
}

// A pod built from the patch for the attempt (its handler then died), Ready
// after the template was set back so that it no longer carries the patch, is
// not reported ready by the informer-driven wait: the sandbox is not counted
// as updated with its template on the old image. Before, the wait reported
// it, and the sandbox Succeeded with spec.template on v1 and the pod on v2.
func TestReadyPodOfAnEditThatUndidThePatchIsNotReported(t *testing.T) {
	startPodcycler(t)
	r := undoneRun(t, "sbx-undone-ready")
	ready := r.bus.subscribe(t, r.ns, r.name, events.TokenPodReady)
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	ctx := context.Background()
	pods := testenv.Get(t).Kube.CoreV1().Pods(r.ns)
	if err := pods.Delete(ctx, r.name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete old pod: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, "old pod gone", func() (bool, error) {
		_, err := pods.Get(ctx, r.name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	// The pod the handler built from the patched template (r.target) for
	// the attempt, before it died.
	built := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: r.name, Namespace: r.ns,
		Labels:          map[string]string{agentsv1alpha1.LabelPodTemplateHash: r.target},
		Annotations:     map[string]string{upgrade.AnnotationPodAttempt: r.prehook.Data.Attempt, upgrade.AnnotationPodOps: testOps},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(r.sandbox, agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox"))}}}
	built.Spec.Containers = []corev1.Container{{Name: "main", Image: "registry.example/sandbox:v2"}}
	if _, err := pods.Create(ctx, built, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the attempt's pod: %v", err)
	}
	expectUndone(t, failed, "the pod built from the patch (uid ")
	select {
	case ev := <-ready:
		t.Fatalf("pod-ready for pod %s: the sandbox would count as updated", ev.Data.NewPodUID)
	default:
	}
}
