package devcluster_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/devcluster"
	"molt.dev/dev/testenv"
)

// TestSandboxClaimedLabelTakesTrueOrFalse installs deploy/admission's label
// policy and checks, with kubectl as a user types it, that a claim written
// "True" (which a SandboxSet does not read as a claim: it would replace or
// delete the sandbox) is refused, naming the value and the fix; that "true"
// and "false" pass; and that a sandbox that carried a bad value before the
// policy can still be updated (so molt's own writes go on) until it is fixed.
func TestSandboxClaimedLabelTakesTrueOrFalse(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	sandbox := func(name, claimed string) string {
		return fmt.Sprintf("apiVersion: agents.kruise.io/v1alpha1\nkind: Sandbox\nmetadata:\n  name: %s\n  labels:\n    agents.kruise.io/sandbox-claimed: %q\nspec:\n  template:\n    spec:\n      containers: [{name: main, image: \"x:1\"}]\n", name, claimed)
	}
	// Written before the policy is there.
	if out, err := kubectl(t, env, sandbox("old", "yes"), "create", "-n", ns, "-f", "-"); err != nil {
		t.Fatalf("create old: %v\n%s", err, out)
	}
	if err := devcluster.InstallAdmissionPolicy(ctx, env.RestConfig, filepath.Join(env.RootDir, devcluster.SandboxLabelsPolicyFile)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admission := env.Kube.AdmissionregistrationV1()
		_ = admission.ValidatingAdmissionPolicyBindings().Delete(ctx, "molt-sandbox-claimed-label", metav1.DeleteOptions{})
		_ = admission.ValidatingAdmissionPolicies().Delete(ctx, "molt-sandbox-claimed-label", metav1.DeleteOptions{})
	})

	var out string
	testenv.Eventually(t, 30*time.Second, "a claim written True refused", func() (bool, error) {
		var err error
		out, err = kubectl(t, env, sandbox("typo", "True"), "create", "--dry-run=server", "-n", ns, "-f", "-")
		return err != nil, fmt.Errorf("create with True: %v\n%s", err, out)
	})
	for _, want := range []string{`label agents.kruise.io/sandbox-claimed="True" of sandbox typo is neither "true" nor "false"`, "kubectl label sbx typo agents.kruise.io/sandbox-claimed=true --overwrite"} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal %q lacks %q", out, want)
		}
	}
	for _, v := range []string{"true", "false"} {
		if out, err := kubectl(t, env, sandbox("ok-"+v, v), "create", "-n", ns, "-f", "-"); err != nil {
			t.Errorf("create with %s: %v\n%s", v, err, out)
		}
	}
	if out, err := kubectl(t, env, "", "label", "sbx", "ok-false", "-n", ns, "agents.kruise.io/sandbox-claimed=TRUE", "--overwrite"); err == nil {
		t.Errorf("relabel to TRUE accepted:\n%s", out)
	}
	// The sandbox written before the policy: other writes go on; a new bad
	// value is refused; the fix passes.
	if out, err := kubectl(t, env, "", "annotate", "sbx", "old", "-n", ns, "example.com/note=kept"); err != nil {
		t.Errorf("annotate a sandbox that had a bad value before the policy: %v\n%s", err, out)
	}
	if out, err := kubectl(t, env, "", "label", "sbx", "old", "-n", ns, "agents.kruise.io/sandbox-claimed=Yes", "--overwrite"); err == nil {
		t.Errorf("relabel old to another bad value accepted:\n%s", out)
	}
	if out, err := kubectl(t, env, "", "label", "sbx", "old", "-n", ns, "agents.kruise.io/sandbox-claimed=true", "--overwrite"); err != nil {
		t.Errorf("fix old's label: %v\n%s", err, out)
	}
}
