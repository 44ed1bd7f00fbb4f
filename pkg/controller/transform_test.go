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
