package e2e

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
)

// TestDeletedOpsSaysTheReleaseIsPending: an ops deleted while no selector
// runs stays Terminating (the selector releases its sandboxes, then takes its
// finalizer off). Rather than hang without a word, it gets Deleting=True
// ReleasePending, which names what is left and asks whether a selector runs,
// and a Warning Event of that reason; once a selector runs again the ops goes.
func TestDeletedOpsSaysTheReleaseIsPending(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "rel", 1, "rel-pool", nil)
	kubectl(t, opsYAML("rel", "rel-pool", "1", "my-registry/sandbox-image:v2"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "rel", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)

	selectors := s.Replicas("selector")
	for _, inst := range selectors {
		s.Kill9(t, inst)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			for _, inst := range selectors {
				s.Restart(t, inst)
			}
		}
	})
	kubectl(t, "", "delete", "suo", "rel", "-n", ns, "--wait=false")
	testenv.Eventually(t, 2*time.Minute, "Deleting=True ReleasePending on the ops", func() (bool, error) {
		ops, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "rel", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionDeleting)
		if c == nil || c.Reason != agentsv1alpha1.DeletingReasonReleasePending {
			return false, fmt.Errorf("Deleting %+v", c)
		}
		return strings.Contains(c.Message, "Is a selector running"), fmt.Errorf("message %q", c.Message)
	})
	testenv.Eventually(t, 30*time.Second, "the ReleasePending Warning Event", func() (bool, error) {
		list, err := s.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=rel,reason=ReleasePending"})
		if err != nil || len(list.Items) == 0 {
			return false, fmt.Errorf("events %v: %v", list, err)
		}
		return list.Items[0].Type == corev1.EventTypeWarning, fmt.Errorf("type %s", list.Items[0].Type)
	})

	for _, inst := range selectors {
		s.Restart(t, inst)
	}
	restarted = true
	testenv.Eventually(t, time.Minute, "the ops gone once a selector runs", func() (bool, error) {
		_, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "rel", metav1.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "not found"), fmt.Errorf("get: %v", err)
	})
}
