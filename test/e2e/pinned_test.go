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

// A sandbox's spec.lifecycle edited while its upgrade runs (here in
// PreUpgrade, to hooks whose restore finds nothing and exits 0) does not
// change the hooks of that upgrade: its postUpgrade restores what its
// preUpgrade backed up, and the edit stays for the next upgrade. Before, the
// edited postUpgrade ran, and the sandbox ended Succeeded with an empty
// workspace (a walk).
func TestLifecycleEditedMidUpgradeKeepsTheAttemptsHooks(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "pin", "pin-pool", "/mnt/shared", "/data/shared", 1)
	kubectl(t, hookOps("pin-ops", "pin-pool", "my-registry/sandbox-image:v2", "sleep 8; "+backupHook, restoreHook, 30), "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, time.Minute, "pin-00 in PreUpgrade", func() (bool, error) {
		c := upgradingCondition(t, s, ns, "pin-00")
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonPreUpgrade, fmt.Errorf("Upgrading %+v", c)
	})
	const edited = `if [ -f /mnt/shared/other-$(hostname).tgz ]; then tar xzf /mnt/shared/other-$(hostname).tgz -C /home/user/workspace; fi`
	kubectl(t, "", "patch", "sandbox", "pin-00", "-n", ns, "--type=json", "-p",
		`[{"op":"replace","path":"/spec/lifecycle/postUpgrade/exec/command/2","value":"`+strings.ReplaceAll(edited, `"`, `\"`)+`"}]`)
	waitOps(t, s, ns, "pin-ops", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if got := workspaceFile(t, s, ns, "pin-00"); got != "data-pin-00" {
		t.Errorf("workspace after the upgrade = %q, want data-pin-00 (restored by the ops's postUpgrade)", got)
	}
	sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "pin-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Spec.Lifecycle == nil || sb.Spec.Lifecycle.PostUpgrade == nil || sb.Spec.Lifecycle.PostUpgrade.Exec.Command[2] != edited {
		t.Errorf("spec.lifecycle after the upgrade: %+v, want the edit kept for the next upgrade", sb.Spec.Lifecycle)
	}
}
