package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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

// A direct upgrade that failed before it replaced the pod (here its
// preUpgrade hook fails) is left by setting the template back to what the
// pod runs, as its message says: the rollback continues the failed attempt,
// keeps the pod, and the sandbox is Running and Succeeded again. Before, the
// pod already ran the template, so no attempt started, and the healthy
// sandbox showed Upgrading (PreUpgradeFailed) and Ready=False for good.
func TestDirectRollbackAfterAFailureLeavesIt(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "rb", 1, "rb-pool", func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
		sb.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{
			Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/sh", "-c", "test ! -e /tmp/nope"}}, TimeoutSeconds: 10}}
	})
	before, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "rb-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// v2 and a hook that fails on it: PreUpgradeFailed, the pod untouched.
	kubectl(t, "", "patch", "sandbox", "rb-00", "-n", ns, "--type=json", "-p",
		`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"my-registry/sandbox-image:v2"},`+
			`{"op":"replace","path":"/spec/lifecycle/preUpgrade/exec/command/2","value":"exit 3"}]`)
	testenv.Eventually(t, 2*time.Minute, "rb-00's direct upgrade failed in PreUpgrade", func() (bool, error) {
		c := upgradingCondition(t, s, ns, "rb-00")
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonPreUpgradeFailed, fmt.Errorf("Upgrading %+v", c)
	})
	// Rolled back, the hook fixed in the same edit.
	kubectl(t, "", "patch", "sandbox", "rb-00", "-n", ns, "--type=json", "-p",
		`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"my-registry/sandbox-image:v1"},`+
			`{"op":"replace","path":"/spec/lifecycle/preUpgrade/exec/command/2","value":"true"}]`)
	waitDirectUpgraded(t, s, ns, "rb-00", "my-registry/sandbox-image:v1")
	after, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "rb-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID {
		t.Errorf("rb-00's pod replaced by the rollback: uid %s, was %s; want it kept", after.UID, before.UID)
	}
}

// A sandbox labelled update-ops by hand while its direct upgrade is in a
// stage is left by every stage to the ops the label names (there is none
// here). Before, the watchdog's failure of the attempt was dropped too, as
// claimed by that ops, and the sandbox stayed in PreUpgrade for good. Now the
// attempt fails, its message says why and the way on, and following it (a
// new template edit) upgrades the sandbox.
func TestDirectAttemptLabelledByHandFailsWithTheWayOn(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "hl", 1, "hl-pool", func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
		sb.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{
			Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/sh", "-c", "sleep 6"}}, TimeoutSeconds: 15}}
	})
	kubectl(t, "", "patch", "sandbox", "hl-00", "-n", ns, "--type=merge", "-p",
		`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v2"}]}}}}`)
	testenv.Eventually(t, 2*time.Minute, "hl-00's direct upgrade in PreUpgrade", func() (bool, error) {
		c := upgradingCondition(t, s, ns, "hl-00")
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonPreUpgrade, fmt.Errorf("Upgrading %+v", c)
	})
	kubectl(t, "", "label", "sandbox", "hl-00", "-n", ns, agentsv1alpha1.LabelUpdateOps+"=nobody")
	var failed *metav1.Condition
	testenv.Eventually(t, 3*time.Minute, "hl-00's direct upgrade failed", func() (bool, error) {
		failed = upgradingCondition(t, s, ns, "hl-00")
		return failed != nil && agentsv1alpha1.IsUpgradingFailedReason(failed.Reason), fmt.Errorf("Upgrading %+v", failed)
	})
	for _, want := range []string{"labelled " + agentsv1alpha1.LabelUpdateOps + "=nobody", "change spec.template again"} {
		if !strings.Contains(failed.Message, want) {
			t.Errorf("failure message %q does not say %q", failed.Message, want)
		}
	}
	// The way on, as the message says.
	kubectl(t, "", "patch", "sandbox", "hl-00", "-n", ns, "--type=merge", "-p",
		`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v3"}]}}}}`)
	waitDirectUpgraded(t, s, ns, "hl-00", "my-registry/sandbox-image:v3")
}

// A sandbox that upgrades directly (spec.upgradePolicy) with hooks of its
// own gets them back once an ops with other hooks has upgraded it, and its
// next direct upgrade backs up and restores with them. Before, the ops's
// spec.lifecycle stayed in the sandbox for good (a walk lost a workspace
// so: its next direct upgrade ran an ops's postUpgrade alone).
func TestOwnHooksComeBackAfterAnOps(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "oh", "oh-pool", "/mnt/shared", "/data/shared", 1)
	own := &agentsv1alpha1.SandboxLifecycle{
		PreUpgrade: &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/bash", "-c",
			`set -e; echo own >> /mnt/shared/own-runs-$(hostname); tar czf /mnt/shared/own-$(hostname).tgz -C /home/user/workspace .`}}, TimeoutSeconds: 30},
		PostUpgrade: &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/bash", "-c",
			`set -e; tar xzf /mnt/shared/own-$(hostname).tgz -C /home/user/workspace`}}, TimeoutSeconds: 30},
	}
	spec, err := json.Marshal(map[string]any{"spec": map[string]any{"upgradePolicy": map[string]string{"type": "Recreate"}, "lifecycle": own}})
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, "", "patch", "sandbox", "oh-00", "-n", ns, "--type=merge", "-p", string(spec))

	kubectl(t, hookOps("oh-ops", "oh-pool", "my-registry/sandbox-image:v2", backupHook, restoreHook, 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "oh-ops", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	testenv.Eventually(t, time.Minute, "oh-00's own hooks back", func() (bool, error) {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "oh-00", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, kept := sb.Annotations["molt.dev/own-lifecycle"]
		return !kept && equality.Semantic.DeepEqual(sb.Spec.Lifecycle, own), fmt.Errorf("lifecycle %+v, own kept aside %v", sb.Spec.Lifecycle, kept)
	})
	if got := workspaceFile(t, s, ns, "oh-00"); got != "data-oh-00" {
		t.Fatalf("workspace after the ops = %q, want data-oh-00", got)
	}

	kubectl(t, "", "patch", "sandbox", "oh-00", "-n", ns, "--type=json", "-p",
		`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"my-registry/sandbox-image:v3"}]`)
	waitDirectUpgraded(t, s, ns, "oh-00", "my-registry/sandbox-image:v3")
	if got := workspaceFile(t, s, ns, "oh-00"); got != "data-oh-00" {
		t.Errorf("workspace after the direct upgrade = %q, want data-oh-00", got)
	}
	if out, _ := sh(t, s, ns, "oh-00", "cat /mnt/shared/own-runs-$(hostname)"); strings.Count(out, "own") != 1 {
		t.Errorf("the sandbox's own preUpgrade ran %d times, want once (in the direct upgrade)", strings.Count(out, "own"))
	}
}

// A direct upgrade failed in PostUpgrade, its new pod deleted and its rebuild
// refused (an admission policy refusing its image), is retried as its
// message says: the template is changed (the restore fixed in the same
// edit), and the pod is rebuilt from the new template before the selector
// looks. Before, that
// pod ran the template already, so the edit started nothing and the sandbox
// stayed PostUpgradeFailed with its backup never restored; now the retry
// continues the failed attempt and restores the workspace into that pod.
func TestDirectRetryAfterARefusedRebuildRestores(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "rr", "rr-pool", "/mnt/shared", "/data/shared", 1)
	lc := map[string]any{
		"preUpgrade": map[string]any{"exec": map[string]any{"command": []string{"/bin/bash", "-c",
			`set -e; tar czf /mnt/shared/rr-$(hostname).tgz -C /home/user/workspace .`}}, "timeoutSeconds": 30},
		"postUpgrade": map[string]any{"exec": map[string]any{"command": []string{"/bin/bash", "-c", `exit 7`}}, "timeoutSeconds": 30},
	}
	spec, err := json.Marshal(map[string]any{"spec": map[string]any{"upgradePolicy": map[string]string{"type": "Recreate"}, "lifecycle": lc}})
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, "", "patch", "sandbox", "rr-00", "-n", ns, "--type=merge", "-p", string(spec))
	kubectl(t, "", "patch", "sandbox", "rr-00", "-n", ns, "--type=json", "-p",
		`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"my-registry/sandbox-image:v2"}]`)
	testenv.Eventually(t, 2*time.Minute, "rr-00's direct upgrade failed in PostUpgrade", func() (bool, error) {
		c := upgradingCondition(t, s, ns, "rr-00")
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonPostUpgradeFailed, fmt.Errorf("Upgrading %+v", c)
	})

	// A policy of the cluster refuses pods of v2: the failed attempt's pod,
	// deleted, cannot be built again.
	const refusedImage = "my-registry/sandbox-image:v2"
	s.env.Refuse(t, ns, testenv.Refusal{
		Resource: "pods", Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Allow:   fmt.Sprintf("object.spec.containers.all(c, c.image != '%s')", refusedImage),
		Message: "pods of " + refusedImage + " are not allowed here",
	}, func(ctx context.Context) error {
		probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: refusedImage}}}}
		_, err := s.env.Kube.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	kubectl(t, "", "delete", "pod", "rr-00", "-n", ns, "--wait=true", "--timeout=60s")
	testenv.Eventually(t, time.Minute, "rr-00's rebuild refused", func() (bool, error) {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), "rr-00", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, refused := sb.Annotations["molt.dev/pod-create-error"]
		return refused, fmt.Errorf("annotations %v", sb.Annotations)
	})
	// The way on the failure names: change the template (here, the fix of
	// the refusal and of the restore at once).
	kubectl(t, "", "patch", "sandbox", "rr-00", "-n", ns, "--type=json", "-p",
		`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"my-registry/sandbox-image:v3"},`+
			`{"op":"replace","path":"/spec/lifecycle/postUpgrade/exec/command/2","value":"set -e; tar xzf /mnt/shared/rr-$(hostname).tgz -C /home/user/workspace"}]`)
	waitDirectUpgraded(t, s, ns, "rr-00", "my-registry/sandbox-image:v3")
	if got := workspaceFile(t, s, ns, "rr-00"); got != "data-rr-00" {
		t.Errorf("workspace after the retry = %q, want data-rr-00", got)
	}
}
