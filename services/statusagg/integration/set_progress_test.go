package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
	"molt.dev/services/statusagg/internal/statusagg"
)

// TestSandboxSetProgressDeadline: a member on the set's current revision
// that does not become available (here its pod is never created) turns the
// set's Progressing False once the deadline passes, with nothing else
// changing (statusagg looks again when the deadline passes), names the
// member and what holds it, and says so in a Warning Event; once its pod
// runs, Progressing turns True.
func TestSandboxSetProgressDeadline(t *testing.T) {
	const deadline = 3 * time.Second
	h := startWith(t, func(c *statusagg.Config) { c.SetProgressDeadline = deadline })
	ns := h.env.Namespace(t)
	ctx := context.Background()
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: ns}}
	set.Spec.Replicas = 1
	set.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: imageV1}}}}
	set, err := h.agents.AgentsV1alpha1().SandboxSets(ns).Create(ctx, set, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := upgrade.Revision(set.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "warm-abcde", Namespace: ns,
		Labels:          map[string]string{agentsv1alpha1.LabelSandboxPool: set.Name, agentsv1alpha1.LabelSandboxClaimed: "false", agentsv1alpha1.LabelTemplateHash: rev},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, agentsv1alpha1.SchemeGroupVersion.WithKind("SandboxSet"))}}}
	sb.Spec.Template = set.Spec.Template.DeepCopy()
	sb, err = h.agents.AgentsV1alpha1().Sandboxes(ns).Create(ctx, sb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now()

	progressing := func(what string, cond func(c *metav1.Condition) bool) *metav1.Condition {
		t.Helper()
		var found *metav1.Condition
		testenv.Eventually(t, timeout, "SandboxSet warm: "+what, func() (bool, error) {
			got, err := h.agents.AgentsV1alpha1().SandboxSets(ns).Get(ctx, set.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			found = meta.FindStatusCondition(got.Status.Conditions, statusagg.ConditionSetProgressing)
			return cond(found), fmt.Errorf("status %s", statusJSON(got.Status))
		})
		return found
	}
	c := progressing("Progressing False", func(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionFalse })
	if time.Since(created) < deadline-time.Second {
		t.Errorf("Progressing turned False %s after the member was created, before the %s deadline", time.Since(created), deadline)
	}
	for _, want := range []string{"1 member on the current revision (" + rev + ")", "warm-abcde: pod warm-abcde does not exist yet",
		"kubectl edit sbs warm -n " + ns, "kubectl describe pod warm-abcde -n " + ns} {
		if c.Reason != statusagg.SetProgressReasonMembersNotAvailable || !strings.Contains(c.Message, want) {
			t.Errorf("Progressing %+v: want reason %s and %q in the message", c, statusagg.SetProgressReasonMembersNotAvailable, want)
		}
	}
	h.waitEvent(ns, set.Name, statusagg.SetEventMembersNotAvailable, "warm-abcde")

	h.createPod(sb)
	progressing("Progressing True once the member runs", func(c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == statusagg.SetProgressReasonMembersAvailable
	})
}
