package statusagg

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// An ops being deleted names the sandboxes its deletion waits for: those it
// claimed whose attempt of this ops is still in a stage, and no other.
func TestDeletionWaitsForTheSandboxesInAStage(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "ops-uid"}}
	ops.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"main","image":"v2"}]}}`)
	image := "v1"
	box := func(name, claim, attempt, reason string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{}}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}}}
		if claim != "" {
			sb.Labels[agentsv1alpha1.LabelUpdateOps] = claim
		}
		if attempt != "" {
			sb.Status.Conditions = []metav1.Condition{
				{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: attempt},
				{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
			}
		}
		return sb
	}
	sandboxes := []*agentsv1alpha1.Sandbox{
		box("c-post", "up", "ops-uid", agentsv1alpha1.UpgradingReasonPostUpgrade),
		box("a-pre", "up", "ops-uid", agentsv1alpha1.UpgradingReasonPreUpgrade),
		box("b-done", "up", "ops-uid", agentsv1alpha1.UpgradingReasonSucceeded),
		box("d-failed", "up", "ops-uid", agentsv1alpha1.UpgradingReasonPreUpgradeFailed),
		box("e-not-started", "up", "", ""),
		box("f-other-ops", "other", "other-uid", agentsv1alpha1.UpgradingReasonUpgradePod),
		box("g-older-attempt", "up", "old-uid", agentsv1alpha1.UpgradingReasonUpgradePod),
	}
	// The patcher wrote the patch and statusagg has not recorded the attempt yet: the
	// selector's release holds it too.
	image = "v2"
	sandboxes = append(sandboxes, box("h-patched-not-recorded", "up", "", ""))
	deleting := box("i-being-deleted", "up", "ops-uid", agentsv1alpha1.UpgradingReasonPreUpgrade)
	deleting.DeletionTimestamp = &metav1.Time{}
	sandboxes = append(sandboxes, deleting)
	got := deletionWaitsFor(ops, sandboxes)
	if want := []string{"a-pre", "c-post", "h-patched-not-recorded"}; !slices.Equal(got, want) {
		t.Fatalf("waits for %v, want %v", got, want)
	}
	if msg := deletionWaitMessage(got); !strings.Contains(msg, "waiting for 3 sandboxes") || !strings.Contains(msg, "(a-pre, c-post, h-patched-not-recorded)") {
		t.Errorf("message %q does not count and name them", msg)
	}
	many := make([]string, 25)
	for i := range many {
		many[i] = "s" + strings.Repeat("x", i)
	}
	if msg := deletionWaitMessage(many); !strings.Contains(msg, "and 15 more") || len(msg) > agentsv1alpha1.MaxConditionMessageLength {
		t.Errorf("message for 25 = %q (%d bytes), want 10 named and 15 more, within a condition's length", msg, len(msg))
	}
}
