package podcycler_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// The new pod of a direct upgrade deleted a moment after its handler built it,
// before the status shows the attempt (a user's `kubectl delete pod --force`
// right after the template edit, seen on make up): the pod built next is the
// attempt's again, and pod-ready follows once the status shows the attempt in
// UpgradePod. A plain pod was built before, never reported on, and the sandbox
// waited in UpgradePod, with no message, for the watchdog's re-drive.
func TestDirectAttemptsPodDeletedBeforeItsStatusIsBuiltForTheAttempt(t *testing.T) {
	startPodcycler(t)
	env := testenv.Get(t)
	ns := env.Namespace(t)
	b := connectBus(t)
	sb := createSandbox(t, ns, "sbx-direct-gone", "registry.example/sandbox:v1")
	old := waitPodReady(t, ns, sb.Name, "")
	sb = updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) {
		s.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
		s.Spec.Template.Spec.Containers[0].Image = "registry.example/sandbox:v2"
	})
	target, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	attempt := upgrade.DirectAttempt(target, sb.Generation)
	ready := b.subscribe(t, ns, sb.Name, events.TokenPodReady)
	if err := b.publisher.Publish(context.Background(), events.Event{Type: events.TypePreHookDone, Data: events.Data{
		Sandbox:        events.SandboxRef{Namespace: ns, Name: sb.Name, UID: sb.UID},
		Attempt:        attempt,
		TargetRevision: target,
		OldPodUID:      old.UID,
	}}); err != nil {
		t.Fatalf("publish prehook-done: %v", err)
	}
	built := waitPodReady(t, ns, sb.Name, string(old.UID))
	if got := built.Annotations[upgrade.AnnotationPodAttempt]; got != attempt {
		t.Fatalf("the handler's pod carries %s=%q, want %q", upgrade.AnnotationPodAttempt, got, attempt)
	}
	zero := int64(0)
	if err := env.Kube.CoreV1().Pods(ns).Delete(context.Background(), sb.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &built.UID}}); err != nil {
		t.Fatal(err)
	}
	again := waitPodReady(t, ns, sb.Name, string(built.UID))
	if got := again.Annotations[upgrade.AnnotationPodAttempt]; got != attempt {
		t.Fatalf("the pod built after the attempt's pod was deleted carries %s=%q, want %q: a plain pod is never reported ready for the attempt",
			upgrade.AnnotationPodAttempt, got, attempt)
	}
	if got := again.Labels[agentsv1alpha1.LabelPodTemplateHash]; got != target {
		t.Errorf("that pod's pod-template-hash = %q, want the target %q", got, target)
	}
	setUpgradeStatus(t, ns, sb.Name, attempt, agentsv1alpha1.UpgradingReasonUpgradePod)
	ev := next(t, ready, "pod-ready of the rebuilt pod", 30*time.Second)
	for ev.Data.NewPodUID != again.UID {
		// The first pod may have been reported before it was deleted.
		ev = next(t, ready, "pod-ready of the rebuilt pod", 30*time.Second)
	}
	if ev.Data.Attempt != attempt {
		t.Errorf("pod-ready attempt = %q, want %q", ev.Data.Attempt, attempt)
	}
}
