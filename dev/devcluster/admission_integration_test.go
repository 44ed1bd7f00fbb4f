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

// TestOneActiveOpsPerNamespace installs deploy/admission's policy and checks,
// with kubectl as a user types it, that a second ops is refused while the
// first is active (naming it, its phase and what to do), that the first
// can be applied again, that other namespaces are not held, that an ops
// being deleted holds the namespace while molt's finalizer is on it, and that
// a finished ops holds nothing. No molt service runs in this package, so the
// phases are written by hand, as statusagg would.
func TestOneActiveOpsPerNamespace(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	if err := devcluster.InstallAdmissionPolicy(ctx, env.RestConfig, filepath.Join(env.RootDir, devcluster.AdmissionPolicyFile)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admission := env.Kube.AdmissionregistrationV1()
		_ = admission.ValidatingAdmissionPolicyBindings().Delete(ctx, "molt-one-active-ops-per-namespace", metav1.DeleteOptions{})
		_ = admission.ValidatingAdmissionPolicies().Delete(ctx, "molt-one-active-ops-per-namespace", metav1.DeleteOptions{})
	})
	ns, other := env.Namespace(t), env.Namespace(t)
	ops := func(name, extra string) string {
		return opsHeader[:strings.Index(opsHeader, "  name: bad")] + "  name: " + name + "\n" + extra + "spec:\n  selector: {}\n  patch: {spec: {containers: [{name: main, image: \"x:2\"}]}}\n"
	}
	create := func(namespace, name, extra string) (string, error) {
		return kubectl(t, env, ops(name, extra), "create", "-n", namespace, "-f", "-")
	}
	setPhase := func(name, phase string) {
		t.Helper()
		if out, err := kubectl(t, env, "", "patch", "suo", name, "-n", ns, "--subresource=status", "--type=merge", "-p", `{"status":{"phase":"`+phase+`"}}`); err != nil {
			t.Fatalf("set phase %s of %s: %v\n%s", phase, name, err, out)
		}
	}
	// refusedFor waits until the policy refuses a server-side dry run of
	// "second" (the API server loads a new policy and its params
	// asynchronously) and checks the words.
	refusedFor := func(want string) {
		t.Helper()
		var last string
		testenv.Eventually(t, 30*time.Second, "the policy refuses ops second", func() (bool, error) {
			out, err := kubectl(t, env, ops("second", ""), "create", "--dry-run=server", "-n", ns, "-f", "-")
			last = out
			return err != nil && strings.Contains(out, "molt-one-active-ops-per-namespace"), nil
		})
		if !strings.Contains(last, want) {
			t.Fatalf("refusal of ops second:\n%s\nwant it to contain %q", last, want)
		}
	}
	admitted := func(namespace, name string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, "ops "+name+" is admitted in "+namespace, func() (bool, error) {
			out, err := kubectl(t, env, ops(name, ""), "create", "--dry-run=server", "-n", namespace, "-f", "-")
			if err != nil && !strings.Contains(out, "molt-one-active-ops-per-namespace") {
				return false, fmt.Errorf("dry run of %s: %v\n%s", name, err, out)
			}
			return err == nil, nil
		})
		if out, err := create(namespace, name, ""); err != nil {
			t.Fatalf("create ops %s in %s: %v\n%s", name, namespace, err, out)
		}
	}

	admitted(ns, "first")
	refusedFor(fmt.Sprintf("SandboxUpdateOps first is still active in namespace %s (phase not set yet): one ops per namespace upgrades at a time. Wait until it is Completed or Failed (kubectl get suo first -n %s -w), or delete it, then create this one", ns, ns))
	setPhase("first", "Updating")
	refusedFor("SandboxUpdateOps first is still active in namespace " + ns + " (phase Updating)")
	// A paused ops does not end by itself: the refusal says so, and how on.
	if out, err := kubectl(t, env, "", "patch", "suo", "first", "-n", ns, "--type=merge", "-p", `{"spec":{"paused":true}}`); err != nil {
		t.Fatalf("pause first: %v\n%s", err, out)
	}
	refusedFor("SandboxUpdateOps first is paused in namespace " + ns + " (phase Updating) and holds it: one ops per namespace upgrades at a time, and a paused ops does not end by itself. Resume it (set spec.paused to false: kubectl edit suo first -n " + ns)
	if out, err := kubectl(t, env, "", "patch", "suo", "first", "-n", ns, "--type=merge", "-p", `{"spec":{"paused":false}}`); err != nil {
		t.Fatalf("resume first: %v\n%s", err, out)
	}

	// The same ops applied again is an update the policy does not look at,
	// and another namespace is free.
	if out, err := kubectl(t, env, ops("first", ""), "apply", "-n", ns, "-f", "-"); err != nil {
		t.Fatalf("apply ops first again: %v\n%s", err, out)
	}
	admitted(other, "elsewhere")

	// Finished (Failed here) holds nothing: second is admitted. While
	// second is deleted with molt's finalizer on it, it still holds the
	// namespace; once the finalizer is gone, third is admitted.
	setPhase("first", "Failed")
	testenv.Eventually(t, 30*time.Second, "ops second is admitted once first failed", func() (bool, error) {
		out, err := create(ns, "second", "  finalizers: [agents.kruise.io/sandboxupdateops-protection]\n")
		if err != nil && !strings.Contains(out, "molt-one-active-ops-per-namespace") {
			return false, fmt.Errorf("create second: %v\n%s", err, out)
		}
		return err == nil, nil
	})
	if out, err := kubectl(t, env, "", "delete", "suo", "second", "-n", ns, "--wait=false"); err != nil {
		t.Fatalf("delete second: %v\n%s", err, out)
	}
	out, err := kubectl(t, env, ops("third", ""), "create", "--dry-run=server", "-n", ns, "-f", "-")
	if err == nil || !strings.Contains(out, "SandboxUpdateOps second is being deleted in namespace "+ns+" and holds it until its sandboxes in flight end their attempt") {
		t.Fatalf("ops third while second is being deleted with molt's finalizer: err %v\n%s", err, out)
	}
	if out, err := kubectl(t, env, "", "patch", "suo", "second", "-n", ns, "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`); err != nil {
		t.Fatalf("remove the finalizer of second: %v\n%s", err, out)
	}
	admitted(ns, "third")
}
