package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// TestDirectUpgradeWithoutOps: a sandbox with spec.upgradePolicy whose
// template changes is upgraded without any ops, its pod recreated once.
func TestDirectUpgradeWithoutOps(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "dir", 1, "dir-pool", func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
	})
	w := watch(t, s, ns)
	old, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "dir-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, "", "patch", "sandbox", "dir-00", "-n", ns, "--type=merge", "-p",
		`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v9"}]}}}}`)
	testenv.Eventually(t, 2*time.Minute, "direct upgrade succeeded", func() (bool, error) {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "dir-00", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		up := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "dir-00", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		done := up != nil && up.Reason == agentsv1alpha1.UpgradingReasonSucceeded && sb.Status.Phase == agentsv1alpha1.SandboxRunning &&
			pod.UID != old.UID && pod.Spec.Containers[0].Image == "my-registry/sandbox-image:v9"
		return done, fmt.Errorf("phase %s upgrading %+v pod image %s", sb.Status.Phase, up, pod.Spec.Containers[0].Image)
	})
	if _, _, adds := w.snapshot(); len(adds["dir-00"]) != 1 {
		t.Fatalf("pods created during the direct upgrade: %v, want exactly 1", adds["dir-00"])
	}
}
