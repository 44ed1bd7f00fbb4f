package molt

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/generated/clientset/versioned/fake"
)

// retry refuses, before it changes anything, while another ops of the
// namespace is not finished, or a retry of the ops exists already.
func TestRetryBlockedBy(t *testing.T) {
	failed := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "u1"}}
	failed.Status.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
	done := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "ns", UID: "u0"}}
	done.Status.Phase = agentsv1alpha1.SandboxUpdateOpsCompleted
	running := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns", UID: "u2"}}
	running.Status.Phase = agentsv1alpha1.SandboxUpdateOpsUpdating
	retried := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up-retry", Namespace: "ns", UID: "u3", Annotations: map[string]string{AnnotationRetryOf: "up"}}}
	retried.Status.Phase = agentsv1alpha1.SandboxUpdateOpsCompleted
	failed.CreationTimestamp = metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	retried.CreationTimestamp = metav1.NewTime(failed.CreationTimestamp.Add(time.Minute))
	earlier := retried.DeepCopy() // the retry of an earlier ops of the same name, weeks ago
	earlier.Name, earlier.UID = "up-retry-old", "u4"
	earlier.CreationTimestamp = metav1.NewTime(failed.CreationTimestamp.Add(-14 * 24 * time.Hour))
	for _, tc := range []struct {
		name   string
		others []*agentsv1alpha1.SandboxUpdateOps
		want   string
	}{
		{"alone, beside finished ones", []*agentsv1alpha1.SandboxUpdateOps{done}, ""},
		{"another ops updating", []*agentsv1alpha1.SandboxUpdateOps{done, running}, "ns/other is Updating"},
		{"retried already", []*agentsv1alpha1.SandboxUpdateOps{retried}, "ns/up-retry already retries up"},
		{"a finished retry of an earlier ops of the same name", []*agentsv1alpha1.SandboxUpdateOps{earlier}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleClientset()
			for _, o := range append([]*agentsv1alpha1.SandboxUpdateOps{failed}, tc.others...) {
				if _, err := client.AgentsV1alpha1().SandboxUpdateOps("ns").Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := retryBlockedBy(context.Background(), client, failed)
			if err != nil {
				t.Fatal(err)
			}
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("retryBlockedBy = %q, want %q", got, tc.want)
			}
		})
	}
}
