package podcycler

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/generated/clientset/versioned/fake"
	"molt.dev/pkg/upgrade"
)

// A direct CheckpointRestore attempt writes its strategy mark (so its
// checkpoints are cleaned up once it succeeds), but never on a sandbox an
// ops claims: there the mark is the patcher's, for the ops's attempt, and a
// direct attempt's pod rebuilt while its failure is still shown must not
// turn the ops's CheckpointRestore into a Recreate that skips the restore.
func TestDirectStrategyMarkNeverOverwritesAnOps(t *testing.T) {
	const direct = upgrade.DirectAttemptPrefix + "rev-3"
	for _, tc := range []struct {
		name      string
		labels    map[string]string
		mark      string
		attempt   string
		wantPatch bool
	}{
		{"direct attempt, no mark yet", nil, "", direct, true},
		{"direct attempt, its mark already there", nil, upgrade.StrategyValue(direct), direct, false},
		{"an ops's attempt: the patcher marks it", map[string]string{agentsv1alpha1.LabelUpdateOps: "up"}, "", "ops-uid", false},
		{"direct attempt on a sandbox an ops claims since", map[string]string{agentsv1alpha1.LabelUpdateOps: "up"}, upgrade.StrategyValue("ops-uid"), direct, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sbx", Namespace: "ns", Labels: tc.labels, Annotations: map[string]string{}}}
			if tc.mark != "" {
				sb.Annotations[upgrade.AnnotationUpgradeStrategy] = tc.mark
			}
			client := fake.NewSimpleClientset()
			client.PrependReactor("patch", "sandboxes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, sb.DeepCopy(), nil })
			c := &cycler{agents: client}
			if err := c.markDirectCheckpointRestore(context.Background(), sb, tc.attempt); err != nil {
				t.Fatal(err)
			}
			patched := false
			for _, a := range client.Actions() {
				patched = patched || a.GetVerb() == "patch"
			}
			if patched != tc.wantPatch {
				t.Errorf("patched = %v, want %v", patched, tc.wantPatch)
			}
		})
	}
}

// A checkpoint error is the checkpoint's failure only while the original
// pod runs; once an earlier delivery deleted it, or the pod is one a failed
// attempt built (a resume restoring a kept checkpoint), it is UpgradePod's.
func TestOriginalPodRuns(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{upgrade.AnnotationResumes: upgrade.ResumesValue("b", "a", agentsv1alpha1.UpgradingReasonUpgradePodFailed)}}}
	d := events.Data{Attempt: "b", ResumedAttempt: "a"}
	pod := func(attempt string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if attempt != "" {
			p.Annotations[upgrade.AnnotationPodAttempt] = attempt
		}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	for _, tc := range []struct {
		name string
		old  *corev1.Pod
		want bool
	}{
		{"the original pod", pod("", false), true},
		{"no pod: an earlier delivery deleted it", nil, false},
		{"the original pod, being deleted", pod("", true), false},
		{"a pod this attempt built", pod("b", false), false},
		{"a pod the failed attempt built", pod("a", false), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := originalPodRuns(tc.old, sb, d); got != tc.want {
				t.Errorf("originalPodRuns = %v, want %v", got, tc.want)
			}
		})
	}
}
