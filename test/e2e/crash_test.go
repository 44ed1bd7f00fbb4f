package e2e

import (
	"context"
	"fmt"
	"strings"
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

// TestHookKeepsItsTimeoutAcrossAHookrunnerCrash: a hookrunner killed while
// its preUpgrade runs leaves the run going in the sandbox; the message comes
// back to the restarted one (after the consumer's ack wait), which follows
// that run to the deadline it had from its start (timeoutSeconds, and the
// runtime reach wait the first delivery may have spent, after the
// stage-started the stream keeps), not a fresh timeoutSeconds from the
// redelivery: here the stage fails about 40+15 s after the hook began.
// Before, it failed timeoutSeconds after the redelivery (here at least 80 s
// after the hook began: killed at 20 s, redelivered 20 to 30 s later).
func TestHookKeepsItsTimeoutAcrossAHookrunnerCrash(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "ht", 1, "ht-pool", nil)
	kubectl(t, hookOps("ht", "ht-pool", "my-registry/sandbox-image:v2", `sleep 300`, "", 40), "apply", "-n", ns, "-f", "-")
	var began time.Time
	testenv.Eventually(t, 2*time.Minute, "ht-00 in PreUpgrade", func() (bool, error) {
		c := upgradingCondition(t, s, ns, "ht-00")
		if c != nil && c.Reason == agentsv1alpha1.UpgradingReasonPreUpgrade {
			began = time.Now()
			return true, nil
		}
		return false, fmt.Errorf("Upgrading %+v", c)
	})
	time.Sleep(20 * time.Second) // the hook runs
	s.Kill9AndRestart(t, "hookrunner")
	testenv.Eventually(t, 2*time.Minute, "ht-00 PreUpgradeFailed", func() (bool, error) {
		c := upgradingCondition(t, s, ns, "ht-00")
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonPreUpgradeFailed, fmt.Errorf("Upgrading %+v", c)
	})
	took := time.Since(began)
	t.Logf("preUpgrade (timeoutSeconds 40) failed %s after it began", took.Round(time.Second))
	if took > 70*time.Second {
		t.Errorf("preUpgrade failed %s after it began, want by its 40s timeout and the 15s reach wait (and polling): the redelivery gave it a fresh timeout", took.Round(time.Second))
	}
	if c := upgradingCondition(t, s, ns, "ht-00"); !strings.Contains(c.Message, "timed out") && !strings.Contains(c.Message, "timeout") {
		t.Errorf("PreUpgradeFailed message %q does not say the hook timed out", c.Message)
	}
}
