package podcycler

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// The pod a direct attempt built, gone before the status shows the attempt,
// is taken for that attempt's only while nothing says it is another's: a
// sandbox created again under the name, a status newer than the pod, another
// attempt in a stage, an ops's claim, or a CheckpointRestore attempt (whose
// handler alone checks what its pod restores) each leave it alone.
func TestUnshownDirectPodGone(t *testing.T) {
	built := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	const attempt = "direct-abc-2"
	sandbox := func() *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "sb-a", Generation: 2}}
		sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
		return sb
	}
	withStatus := func(sb *agentsv1alpha1.Sandbox, shown, reason string, at time.Time) *agentsv1alpha1.Sandbox {
		sb.Status.Conditions = []metav1.Condition{
			{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason, LastTransitionTime: metav1.NewTime(at)},
			{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: shown, LastTransitionTime: metav1.NewTime(at)},
		}
		return sb
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", CreationTimestamp: metav1.NewTime(built),
		Annotations:     map[string]string{upgrade.AnnotationPodAttempt: attempt},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&metav1.ObjectMeta{Name: "a", UID: "sb-a"}, sandboxKind)}}}
	for _, tc := range []struct {
		name string
		sb   *agentsv1alpha1.Sandbox
		want string
	}{
		{"no status yet", sandbox(), attempt},
		{"an earlier attempt ended before the pod was built", withStatus(sandbox(), "direct-old-1", agentsv1alpha1.UpgradingReasonSucceeded, built.Add(-time.Minute)), attempt},
		{"the status shows the attempt", withStatus(sandbox(), attempt, agentsv1alpha1.UpgradingReasonUpgradePod, built), ""},
		{"a sandbox created again under the name", func() *agentsv1alpha1.Sandbox { sb := sandbox(); sb.UID = "sb-a2"; return sb }(), ""},
		{"an attempt recorded after the pod was built", withStatus(sandbox(), "ops-uid", agentsv1alpha1.UpgradingReasonPreUpgradeFailed, built.Add(time.Minute)), ""},
		{"another attempt in a stage", withStatus(sandbox(), "direct-old-1", agentsv1alpha1.UpgradingReasonPostUpgrade, built.Add(-time.Minute)), ""},
		{"claimed by an ops", func() *agentsv1alpha1.Sandbox {
			sb := sandbox()
			sb.Labels = map[string]string{agentsv1alpha1.LabelUpdateOps: "ops"}
			return sb
		}(), ""},
		{"a CheckpointRestore attempt", func() *agentsv1alpha1.Sandbox {
			sb := sandbox()
			sb.Spec.UpgradePolicy.Type = agentsv1alpha1.UpgradeTypeCheckpointRestore
			return sb
		}(), ""},
	} {
		c := &cycler{}
		c.builders.saw("ns/a", pod)
		if got := c.unshownDirectPodGone("ns/a", tc.sb); got != tc.want {
			t.Errorf("%s: unshownDirectPodGone = %q, want %q", tc.name, got, tc.want)
		}
	}
	// A plain pod seen since forgets the attempt's.
	c := &cycler{}
	c.builders.saw("ns/a", pod)
	plain := pod.DeepCopy()
	plain.Annotations = nil
	c.builders.saw("ns/a", plain)
	if got := c.unshownDirectPodGone("ns/a", sandbox()); got != "" {
		t.Errorf("after a plain pod: unshownDirectPodGone = %q, want none", got)
	}
}
