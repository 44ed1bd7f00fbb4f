package e2e

import (
	"context"
	"fmt"
	"strings"
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

// TestDirectContinuesAnOpsFailureWhenTheTemplateIsFixed: a sandbox with
// spec.upgradePolicy that an ops failed in UpgradePod (an image that does
// not exist; its backup taken, its old pod replaced) is upgraded by the
// user's fix of its template alone, as API.md's resume rule says: from
// UpgradePod, the preUpgrade not run again (the backup of the original pod
// is kept, never overwritten by one of the failed attempt's empty pod), the
// pod created once, postUpgrade restoring the workspace, and no
// upgrade-failed or ops label left.
func TestDirectContinuesAnOpsFailureWhenTheTemplateIsFixed(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "dfix", "dfix-pool", "/mnt/shared", "/data/shared", 1)
	kubectl(t, "", "patch", "sbx", "dfix-00", "-n", ns, "--type=merge", "-p", `{"spec":{"upgradePolicy":{"type":"Recreate"}}}`)
	kubectl(t, hookOps("bad", "dfix-pool", "my-registry/sandbox-image:non-existent", backupHook, restoreHook, 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "bad", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	if c := upgradingCondition(t, s, ns, "dfix-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed {
		t.Fatalf("Upgrading = %+v, want UpgradePodFailed", c)
	}
	w := watch(t, s, ns)

	// The user's fix, with the ops left as it is (Failed).
	kubectl(t, "", "patch", "sbx", "dfix-00", "-n", ns, "--type=json", "-p",
		`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"my-registry/sandbox-image:v2"}]`)
	testenv.Eventually(t, 2*time.Minute, "the fixed template rolled out", func() (bool, error) {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "dfix-00", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		up := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "dfix-00", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		done := up != nil && up.Reason == agentsv1alpha1.UpgradingReasonSucceeded && sb.Status.Phase == agentsv1alpha1.SandboxRunning &&
			pod.Spec.Containers[0].Image == "my-registry/sandbox-image:v2"
		return done, fmt.Errorf("phase %s upgrading %+v message %q pod image %s", sb.Status.Phase, up, sb.Status.Message, pod.Spec.Containers[0].Image)
	})
	sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "dfix-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if attempt := meta.FindStatusCondition(sb.Status.Conditions, "UpgradeAttempt"); attempt == nil || !strings.HasPrefix(attempt.Message, "direct-") {
		t.Errorf("the attempt that finished is %+v; want a direct one", attempt)
	}
	for _, label := range []string{agentsv1alpha1.LabelUpgradeFailed, agentsv1alpha1.LabelUpdateOps} {
		if v, ok := sb.Labels[label]; ok {
			t.Errorf("label %s=%q left on the upgraded sandbox", label, v)
		}
	}
	if got := workspaceFile(t, s, ns, "dfix-00"); got != "data-dfix-00" {
		t.Fatalf("workspace after the direct resume = %q, want data-dfix-00", got)
	}
	if out, _ := sh(t, s, ns, "dfix-00", "cat /mnt/shared/pre-runs-$(hostname)"); strings.Count(out, "run") != 1 {
		t.Fatalf("preUpgrade ran %d times, want once (the backup of the original pod is kept)", strings.Count(out, "run"))
	}
	if _, _, adds := w.snapshot(); len(adds["dfix-00"]) != 1 {
		t.Fatalf("pods created by the direct resume: %v, want exactly 1", adds["dfix-00"])
	}
}
