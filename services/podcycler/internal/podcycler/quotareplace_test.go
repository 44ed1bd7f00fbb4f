package podcycler_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// In a namespace whose ResourceQuota is full to the pod, the replacement's dry
// run passes (deleting the old pod makes room), but the API server counts that
// room only once kube-controller-manager's quota controller has recounted the
// namespace, after the delete. The create refused for the quota in between is
// tried again, not failed: the new pod is created once the quota's status
// shows the room, and pod-ready follows with no failure. (The test cluster
// runs no quota controller: the test writes the status as it would.)
func TestReplacementWaitsForTheQuotaToCountTheDeletedPod(t *testing.T) {
	startPodcycler(t)
	env := testenv.Get(t)
	ctx, ns, name := context.Background(), env.Namespace(t), "sbx-quota"
	cpu := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/sandbox:v1", Resources: cpu}}}}
	sb, err := agents(t).AgentsV1alpha1().Sandboxes(ns).Create(ctx, sb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldPod := waitPodReady(t, ns, name, "")
	hard := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1"), corev1.ResourceRequestsCPU: resource.MustParse("2")}
	env.SetQuota(t, ns, "q", hard, corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1"), corev1.ResourceRequestsCPU: resource.MustParse("500m")})

	pods := watchPodCreations(t, ns)
	b := connectBus(t)
	sb = updateSandbox(t, ns, name, func(s *agentsv1alpha1.Sandbox) {
		s.Labels = map[string]string{agentsv1alpha1.LabelUpdateOps: testOps}
		s.Spec.Template.Spec.Containers[0].Image = "registry.example/sandbox:v2"
	})
	setUpgradeStatus(t, ns, name, testAttempt, agentsv1alpha1.UpgradingReasonUpgradePod)
	target, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	failed := b.subscribe(t, ns, name, events.TokenFailed)
	ready := b.subscribe(t, ns, name, events.TokenPodReady)
	if err := b.publisher.Publish(ctx, events.Event{Type: events.TypePreHookDone, Data: events.Data{
		Ops:     events.OpsRef{Name: testOps, UID: types.UID(testAttempt)},
		Sandbox: events.SandboxRef{Namespace: ns, Name: name, UID: sb.UID}, Attempt: testAttempt,
		TargetRevision: target, OldPodUID: oldPod.UID,
	}}); err != nil {
		t.Fatal(err)
	}

	// The old pod goes; the quota still counts it, so no pod can be created.
	waitPodGone(t, ns, name)
	select {
	case ev := <-failed:
		t.Fatalf("the upgrade failed while the quota had not counted the delete yet: %s %s: %s", ev.Data.Stage, ev.Data.Reason, ev.Data.Message)
	case <-time.After(8 * time.Second):
	}
	if got := pods.of(name); len(got) != 0 {
		t.Fatalf("pods created while the quota is full: %v", got)
	}

	// The quota controller's recount, as it would write it.
	env.SetQuota(t, ns, "q", hard, corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0"), corev1.ResourceRequestsCPU: resource.MustParse("0")})
	ev := next(t, ready, "pod-ready", 60*time.Second)
	pod := waitPodReady(t, ns, name, string(oldPod.UID))
	if ev.Data.NewPodUID != pod.UID || pod.Spec.Containers[0].Image != "registry.example/sandbox:v2" {
		t.Errorf("pod-ready for %s, pod %s runs %s; want the new pod on v2", ev.Data.NewPodUID, pod.UID, pod.Spec.Containers[0].Image)
	}
	if got := pods.of(name); len(got) != 1 {
		t.Errorf("pods created = %v, want exactly one", got)
	}
	select {
	case ev := <-failed:
		t.Errorf("the upgrade failed: %s %s: %s", ev.Data.Stage, ev.Data.Reason, ev.Data.Message)
	default:
	}
}
