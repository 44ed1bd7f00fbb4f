package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/devcluster"
	"molt.dev/dev/testenv"
)

// TestPluginPlanWhileAnotherOpsIsActive: with deploy/admission's
// one-active-ops policy in force, the API server refuses every create of a
// second ops in the namespace, dry runs too. `kubectl molt plan` of a correct
// file still shows what the ops would do, says why it cannot be created yet
// and when to apply it, and exits 1, instead of asking to fix the file.
func TestPluginPlanWhileAnotherOpsIsActive(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "pa", 2, "pa-pool", nil)
	if err := devcluster.InstallAdmissionPolicy(ctx, s.env.RestConfig, filepath.Join(s.env.RootDir, devcluster.AdmissionPolicyFile)); err != nil {
		t.Fatal(err)
	}
	second := opsYAML("second", "pa-pool", "1", "my-registry/sandbox-image:v2")
	dryRunSecond := func() error {
		cmd := exec.Command(filepath.Join(s.env.RootDir, "bin", "kubectl"), "--kubeconfig="+s.env.Kubeconfig, "create", "--dry-run=server", "-n", ns, "-f", "-")
		cmd.Stdin = strings.NewReader(second)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		admission := s.env.Kube.AdmissionregistrationV1()
		_ = admission.ValidatingAdmissionPolicyBindings().Delete(ctx, oneActiveOpsPolicy, metav1.DeleteOptions{})
		_ = admission.ValidatingAdmissionPolicies().Delete(ctx, oneActiveOpsPolicy, metav1.DeleteOptions{})
		// The API server drops a deleted policy asynchronously, and the
		// package's other tests start a second ops beside an active one.
		testenv.Eventually(t, 30*time.Second, "the one-active-ops policy gone", func() (bool, error) {
			err := dryRunSecond()
			return err == nil, err
		})
		_ = s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Delete(ctx, "first", metav1.DeleteOptions{})
	})
	kubectl(t, strings.Replace(opsYAML("first", "pa-pool", "1", "my-registry/sandbox-image:v2"), "spec:\n", "spec:\n  paused: true\n", 1), "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, 30*time.Second, "the policy refusing a second ops", func() (bool, error) {
		err := dryRunSecond()
		return err != nil && strings.Contains(err.Error(), oneActiveOpsPolicy), fmt.Errorf("dry run of second: %v", err)
	})

	file := filepath.Join(t.TempDir(), "second.yaml")
	if err := os.WriteFile(file, []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := molt(t, "", "plan", "-f", file, "-n", ns)
	t.Logf("plan:\n%s\n%s", out, errOut)
	for _, want := range []string{"refuses to create it while another ops of the namespace is active", "it would wait in Pending until SandboxUpdateOps first ends", "SandboxUpdateOps first is paused, so it ends only once resumed", "Selected (2)", "pa-00", "pa-01", "+  - image: my-registry/sandbox-image:v2"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}
	if code != 1 || !strings.Contains(errOut, "cannot be created yet") || !strings.Contains(errOut, "SandboxUpdateOps first is paused") ||
		!strings.Contains(errOut, "a paused ops does not end by itself") ||
		!strings.Contains(errOut, "apply it once that ops has ended") || strings.Contains(errOut, "fix "+file) {
		t.Errorf("plan exit %d, stderr %q; want 1, why it cannot be created yet and when to apply it, not to fix the file", code, errOut)
	}
}
