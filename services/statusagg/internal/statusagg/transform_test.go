package statusagg

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestPodStatusOnlyKeepsWhatStatusaggReads(t *testing.T) {
	controller := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sb", Namespace: "ns", UID: "u", Labels: map[string]string{"pod-template-hash": "r1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "agents.kruise.io/v1alpha1", Kind: "Sandbox", Name: "sb", UID: "sb-uid", Controller: &controller}},
			Annotations:     map[string]string{"molt.dev/attempt": "a"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kwok"}}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "main", Image: "v2"}},
			Tolerations: []corev1.Toleration{{Key: "k"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	out, err := podStatusOnly(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	if got.Spec.NodeName != "node-1" || len(got.Spec.Containers) != 0 || len(got.Spec.Tolerations) != 0 {
		t.Errorf("spec after transform = %+v, want only nodeName node-1", got.Spec)
	}
	if got.ManagedFields != nil {
		t.Errorf("managedFields kept: %v", got.ManagedFields)
	}
	if got.UID != "u" || got.Labels["pod-template-hash"] != "r1" || got.Annotations["molt.dev/attempt"] != "a" ||
		got.Status.PodIP != "10.0.0.1" || len(got.Status.Conditions) != 1 {
		t.Errorf("metadata or status lost: %+v", got)
	}
	// A Deployment's pod (it carries pod-template-hash too) keeps no status.
	other := pod.DeepCopy()
	other.OwnerReferences[0].APIVersion, other.OwnerReferences[0].Kind = "apps/v1", "ReplicaSet"
	if out, err := podStatusOnly(other); err != nil || out.(*corev1.Pod).Status.PodIP != "" || out.(*corev1.Pod).Name != "sb" {
		t.Errorf("a ReplicaSet's pod after transform = %+v, %v; want its name and no status", out, err)
	}
	// A tombstone passes through unchanged.
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/sb", Obj: pod}
	if out, err := podStatusOnly(tomb); err != nil || out != any(tomb) {
		t.Errorf("tombstone: %v, %v", out, err)
	}
}
