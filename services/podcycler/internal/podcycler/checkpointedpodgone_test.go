package podcycler

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestCheckpointedPodGone: a checkpoint that failed because its pod went is told apart
// from a checkpointer's failure by the pod as the API server has it: gone,
// replaced (another UID) or being deleted; the same pod running is not gone.
func TestCheckpointedPodGone(t *testing.T) {
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cbox-0", Namespace: "c1", UID: "old"}}
	deleting := old.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	deleting.Finalizers = []string{"example.com/hold"}
	replaced := old.DeepCopy()
	replaced.UID = "new"
	for _, tc := range []struct {
		name string
		now  []*corev1.Pod
		want bool
	}{
		{"running", []*corev1.Pod{old.DeepCopy()}, false},
		{"deleted", nil, true},
		{"replaced by a pod of the name", []*corev1.Pod{replaced}, true},
		{"being deleted", []*corev1.Pod{deleting}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleClientset()
			for _, p := range tc.now {
				if err := client.Tracker().Add(p); err != nil {
					t.Fatal(err)
				}
			}
			c := &cycler{kube: client}
			got, err := c.checkpointedPodGone(context.Background(), old)
			if err != nil || got != tc.want {
				t.Fatalf("checkpointedPodGone = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
