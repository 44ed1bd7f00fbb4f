package podcycler_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	"molt.dev/pkg/upgrade"
)

// A namespace whose ResourceQuota is full to the pod refuses the dry run of every
// replacement, as it counts the old pod that the replacement deletes first: that is not
// a refusal of the new pod. A new pod that needs more than the old one's room is still
// refused. The quota's status is written here as its controller would (the test
// cluster runs none), and the API server's quota admission reads it.
func TestDryRunOfAReplacementInAFullQuota(t *testing.T) {
	env := testenv.Get(t)
	ctx, ns := context.Background(), env.Namespace(t)
	pods := env.Kube.CoreV1().Pods(ns)
	podAsking := func(image, cpu string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
		}
	}
	old, err := pods.Create(ctx, podAsking("registry.example/sandbox:v1", "500m"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setQuota := func(hardPods, usedPods, hardCPU string) {
		t.Helper()
		env.SetQuota(t, ns, "q",
			corev1.ResourceList{corev1.ResourcePods: resource.MustParse(hardPods), corev1.ResourceRequestsCPU: resource.MustParse(hardCPU)},
			corev1.ResourceList{corev1.ResourcePods: resource.MustParse(usedPods), corev1.ResourceRequestsCPU: resource.MustParse("500m")})
	}

	setQuota("1", "1", "2")
	replacement := podAsking("registry.example/sandbox:v2", "500m")
	refused, err := upgrade.DryRunCreatePod(ctx, env.Kube, replacement)
	if err != nil || !upgrade.QuotaExceeded(refused) {
		t.Fatalf("dry run of a pod in a full quota = %q, %v; want exceeded quota (else this test shows nothing)", refused, err)
	}
	if refused, err := upgrade.DryRunReplacePod(ctx, env.Kube, replacement, old); err != nil || refused != "" {
		t.Fatalf("dry run of the replacement of the old pod = %q, %v; want it accepted", refused, err)
	}
	if refused, err := upgrade.DryRunReplacePod(ctx, env.Kube, replacement, nil); err != nil || !upgrade.QuotaExceeded(refused) {
		t.Fatalf("dry run with no old pod = %q, %v; want exceeded quota", refused, err)
	}

	// Room for one more pod of the old pod's size, not of the new one's.
	setQuota("2", "1", "1")
	if refused, err := upgrade.DryRunReplacePod(ctx, env.Kube, podAsking("registry.example/sandbox:v2", "800m"), old); err != nil || !upgrade.QuotaExceeded(refused) {
		t.Fatalf("dry run of a replacement asking more than the quota's room = %q, %v; want exceeded quota", refused, err)
	}
	// Full to the pod, and the new pod asks for more CPU than the old one
	// frees: refused for the CPU too, in words the old pod's copy does not get.
	setQuota("1", "1", "1")
	if refused, err := upgrade.DryRunReplacePod(ctx, env.Kube, podAsking("registry.example/sandbox:v2", "800m"), old); err != nil || !upgrade.QuotaExceeded(refused) {
		t.Fatalf("dry run of a larger replacement in a full quota = %q, %v; want exceeded quota", refused, err)
	}
	// An old pod that ended is not counted: deleting it frees nothing.
	ended := old.DeepCopy()
	ended.Status.Phase = corev1.PodFailed
	setQuota("1", "1", "2")
	if refused, err := upgrade.DryRunReplacePod(ctx, env.Kube, replacement, ended); err != nil || !upgrade.QuotaExceeded(refused) {
		t.Fatalf("dry run of the replacement of an ended pod = %q, %v; want exceeded quota", refused, err)
	}
}
