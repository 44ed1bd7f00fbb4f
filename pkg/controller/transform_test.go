package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestStripManagedFields(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kwok", Operation: metav1.ManagedFieldsOperationUpdate}}}}
	got, err := StripManagedFields(pod)
	if err != nil {
		t.Fatal(err)
	}
	p := got.(*corev1.Pod)
	if p.ManagedFields != nil || p.Name != "p" || p.Labels["a"] != "b" {
		t.Fatalf("stripped pod = %+v, want managedFields nil and the rest kept", p.ObjectMeta)
	}
	// What is not an object passes unchanged.
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}
	if got, err := StripManagedFields(tomb); err != nil || got != tomb {
		t.Fatalf("tombstone = %v, %v; want it unchanged", got, err)
	}
}

// A pod a Sandbox controls is cached whole; any other pod (a Deployment's, which
// carries pod-template-hash too) only by its identity, labels and owners.
func TestSandboxPodsOnly(t *testing.T) {
	yes := true
	owned := func(apiVersion, kind string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Labels: map[string]string{"pod-template-hash": "h"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "o", UID: "o-uid", Controller: &yes}},
				ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kwok"}}},
			Spec:   corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	got, err := SandboxPodsOnly(owned("agents.kruise.io/v1alpha1", "Sandbox"))
	if p := got.(*corev1.Pod); err != nil || len(p.Spec.Containers) != 1 || p.Status.Phase != corev1.PodRunning || p.ManagedFields != nil {
		t.Fatalf("sandbox pod = %+v, %v; want it whole but for managedFields", p, err)
	}
	for _, other := range []*corev1.Pod{owned("apps/v1", "ReplicaSet"), owned("example.com/v1", "Sandbox"), {ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"}}} {
		got, err := SandboxPodsOnly(other)
		p := got.(*corev1.Pod)
		if err != nil || len(p.Spec.Containers) != 0 || p.Status.Phase != "" || p.Name != "p" || p.UID != "u" ||
			len(p.OwnerReferences) != len(other.OwnerReferences) || p.Labels["pod-template-hash"] != other.Labels["pod-template-hash"] {
			t.Fatalf("pod owned by %v = %+v, %v; want its identity, labels and owners only", other.OwnerReferences, p, err)
		}
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p"}
	if got, err := SandboxPodsOnly(tomb); err != nil || got != tomb {
		t.Fatalf("tombstone = %v, %v; want it unchanged", got, err)
	}
}
