package molt

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/generated/clientset/versioned/fake"
	"molt.dev/pkg/upgrade"
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

// A retry is planned from the sandboxes as they are: one a later ops upgraded
// since the failed ops began (here after it failed under it) is named, so the
// retry does not put the failed ops's broken patch over it again; one the
// failed ops never touched and that still needs its patch counts as not
// started; one still left failed by it is neither (it is retried as failed).
func TestRetryTargetsNameSandboxesUpgradedSince(t *testing.T) {
	created := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	bad := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "ns", UID: "bad-uid", CreationTimestamp: metav1.NewTime(created)}}
	bad.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ws"}}
	bad.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"sandbox","image":"reg/non-existent:v2"}]}}`)
	fix := agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "fix", Namespace: "ns", UID: "fix-uid"}}
	box := func(name, image, attempt, reason string, at time.Time) agentsv1alpha1.Sandbox {
		sb := agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "ws"}}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}
		sb.Status.Phase = agentsv1alpha1.SandboxRunning
		if attempt != "" {
			sb.Status.Conditions = []metav1.Condition{
				{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: attempt, LastTransitionTime: metav1.NewTime(at)},
				{Type: agentsv1alpha1.ConditionUpgrading, Status: agentsv1alpha1.UpgradingConditionStatus(reason), Reason: reason, LastTransitionTime: metav1.NewTime(at)},
			}
			if agentsv1alpha1.IsUpgradingFailedReason(reason) {
				sb.Status.Phase = agentsv1alpha1.SandboxUpgrading
				sb.Labels[agentsv1alpha1.LabelUpgradeFailed] = "true"
			}
		}
		return sb
	}
	later := created.Add(10 * time.Minute)
	all := []agentsv1alpha1.Sandbox{
		box("s-0", "reg/img:v2", "fix-uid", agentsv1alpha1.UpgradingReasonSucceeded, later), // failed under bad, then fixed
		box("s-1", "reg/img:v2", "fix-uid", agentsv1alpha1.UpgradingReasonSucceeded, later), // never started by bad, upgraded by fix
		box("s-2", "reg/img:v1", "old-uid", agentsv1alpha1.UpgradingReasonSucceeded, created.Add(-time.Hour)),
		box("s-3", "reg/img:v1", "bad-uid", agentsv1alpha1.UpgradingReasonPreUpgradeFailed, created.Add(time.Minute)),
	}
	all[3].Labels[agentsv1alpha1.LabelUpdateOps] = "bad"
	got := retryTargets(bad, all, []agentsv1alpha1.SandboxUpdateOps{*bad, fix})
	if want := []string{"s-0: Succeeded by ops fix", "s-1: Succeeded by ops fix"}; !slices.Equal(got.since, want) {
		t.Errorf("since = %v, want %v", got.since, want)
	}
	if got.notStarted != 1 {
		t.Errorf("notStarted = %d, want 1 (s-2)", got.notStarted)
	}
	// The API keeps whole seconds: bad failed fast and fix resumed s-0 within
	// the second bad was created, which is since all the same.
	all[0].Status.Conditions[0].LastTransitionTime = bad.CreationTimestamp
	got = retryTargets(bad, all, []agentsv1alpha1.SandboxUpdateOps{*bad, fix})
	if want := []string{"s-0: Succeeded by ops fix", "s-1: Succeeded by ops fix"}; !slices.Equal(got.since, want) {
		t.Errorf("with s-0 fixed in the second bad was created: since = %v, want %v", got.since, want)
	}
	got = retryTargets(bad, all[2:], []agentsv1alpha1.SandboxUpdateOps{*bad})
	if len(got.since) != 0 || got.notStarted != 1 {
		t.Errorf("without the fixed sandboxes: %+v, want 1 not started and none upgraded since", got)
	}
}
