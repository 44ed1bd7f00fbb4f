package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// TestKill9EachServiceDuringUpgrade kills every service with SIGKILL in turn
// while 30 sandboxes upgrade, restarts it, and checks the upgrade completes
// with every pod recreated exactly once and exact counters.
func TestKill9EachServiceDuringUpgrade(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "k9", 30, "k9-pool", nil)
	w := watch(t, s, ns)
	kubectl(t, opsYAML("k9", "k9-pool", "3", "my-registry/sandbox-image:v2"), "apply", "-n", ns, "-f", "-")

	progress := func() int32 {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "k9", metav1.GetOptions{})
		if err != nil {
			return 0
		}
		return o.Status.UpdatedReplicas
	}
	for i, name := range serviceNames {
		want := int32(2 + 4*i)
		testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("%d sandboxes updated before killing %s", want, name), func() (bool, error) {
			return progress() >= want, nil
		})
		s.Kill9AndRestart(t, name)
	}
	ops := waitOps(t, s, ns, "k9", agentsv1alpha1.SandboxUpdateOpsCompleted, 4*time.Minute)
	st := ops.Status
	if st.Replicas != 30 || st.UpdatedReplicas != 30 || st.UpdatingReplicas != 0 || st.FailedReplicas != 0 {
		t.Fatalf("status = %+v, want 30 30 0 0", st)
	}
	_, _, adds := w.snapshot()
	for _, n := range names {
		if len(adds[n]) != 1 {
			t.Errorf("sandbox %s: %d pods created, want exactly 1 (%v)", n, len(adds[n]), adds[n])
		}
	}
}
