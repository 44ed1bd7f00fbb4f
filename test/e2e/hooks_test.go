package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/devruntime"
	"molt.dev/dev/testenv"
	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// sh runs a bash script inside a sandbox through its agent-runtime, the way
// the hookrunner does, and returns stdout and the exit code.
func sh(t *testing.T, s *stack, ns, name, script string) (string, int32) {
	t.Helper()
	ctx := context.Background()
	var res agentruntime.Result
	testenv.Eventually(t, 30*time.Second, "agent-runtime of "+name+" answers", func() (bool, error) {
		url, token, err := devruntime.SandboxEndpoint(ctx, s.env.Kube, s.agents, ns, name)
		if err != nil {
			return false, err
		}
		res, err = agentruntime.Exec(ctx, agentruntime.ExecRequest{BaseURL: url, AccessToken: token, Command: []string{"/bin/bash", "-c", script}, Timeout: 20 * time.Second})
		return err == nil, err
	})
	return res.Stdout, res.ExitCode
}

// workspaceSandboxes makes n Running sandboxes whose container mounts a
// hostPath volume at mountPath (persistent) and writes a file into the
// container-local /home/user/workspace of each.
func workspaceSandboxes(t *testing.T, s *stack, ns, prefix, pool, mountPath, hostPath string, n int) []string {
	t.Helper()
	names := makeSandboxes(t, s, ns, prefix, n, pool, func(sb *agentsv1alpha1.Sandbox) {
		path := strings.ReplaceAll(hostPath, "$NAME", sb.Name)
		sb.Spec.Runtimes = []agentsv1alpha1.RuntimeConfig{{Name: "agent-runtime"}, {Name: "csi"}}
		// The workspace is pod-local (an emptyDir, as the image's own
		// directory would be): it exists in every new pod and starts empty.
		sb.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: mountPath}, {Name: "workspace", MountPath: "/home/user/workspace"}}
		sb.Spec.Template.Spec.Volumes = []corev1.Volume{
			{Name: "shared", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}},
			{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}
	})
	for _, n := range names {
		if _, code := sh(t, s, ns, n, "mkdir -p /home/user/workspace/sub && echo data-$(hostname) > /home/user/workspace/sub/file.txt && mkdir -p /root/.openclaw && echo claw-$(hostname) > /root/.openclaw/state"); code != 0 {
			t.Fatalf("seed files into %s: exit %d", n, code)
		}
	}
	return names
}

func workspaceFile(t *testing.T, s *stack, ns, name string) string {
	out, _ := sh(t, s, ns, name, "cat /home/user/workspace/sub/file.txt 2>/dev/null")
	return strings.TrimSpace(out)
}

// TestSeedUpgradeWithBackup applies seed 000's full example verbatim: the
// preUpgrade backs the workspace up to /mnt/shared, the pod is recreated,
// the postUpgrade restores it and removes the archive. The seed's rollback
// after it would restore nothing (the archive is gone): molt holds it,
// naming the sandboxes. Without hooks the files are lost, which proves the
// recreation is real.
func TestSeedUpgradeWithBackup(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	const ns = "default"
	const pool = "my-sandbox-pool"
	t.Cleanup(func() {
		for _, o := range []string{"upgrade-with-backup", "rollback-sandboxes", "no-hooks"} {
			_ = s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Delete(ctx, o, metav1.DeleteOptions{})
		}
		_ = s.agents.AgentsV1alpha1().Sandboxes(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: poolLabel + "=" + pool})
	})
	testenv.Eventually(t, time.Minute, "no other ops active in default", func() (bool, error) {
		list, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, err
	})
	names := workspaceSandboxes(t, s, ns, "bk", pool, "/mnt/shared", "/data/shared", 5)
	oldUID := map[string]string{}
	for _, n := range names {
		pod, _ := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		oldUID[n] = string(pod.UID)
	}

	kubectl(t, seed(t, "000-02-sandboxupdateops-upgrade-with-backup.yaml"), "apply", "-f", "-")
	waitOps(t, s, ns, "upgrade-with-backup", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)
	for _, n := range names {
		pod, _ := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if string(pod.UID) == oldUID[n] {
			t.Fatalf("%s: pod was not recreated", n)
		}
		if got := workspaceFile(t, s, ns, n); got != "data-"+n {
			t.Errorf("%s: workspace file after upgrade = %q, want data-%s", n, got, n)
		}
		if out, _ := sh(t, s, ns, n, "ls /mnt/shared/backup-$(hostname).tar.gz 2>&1 || true"); !strings.Contains(out, "No such file") {
			t.Errorf("%s: backup archive still there: %s", n, out)
		}
	}

	// The seed's rollback (000-07, with the selector its snippet omits) would
	// restore nothing: the upgrade's postUpgrade deleted the backup. molt holds
	// it before its first sandbox, naming them all; nothing is touched.
	rollback := strings.Replace(seed(t, "000-07-sandboxupdateops-rollback-sandboxes.yaml"), "spec:\n",
		fmt.Sprintf("spec:\n  selector:\n    matchLabels:\n      %s: %s\n", poolLabel, pool), 1)
	pods := map[string]types.UID{}
	for _, n := range names {
		pod, _ := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		pods[n] = pod.UID
	}
	kubectl(t, rollback, "apply", "-f", "-")
	testenv.Eventually(t, 30*time.Second, "molt's NoBackup pause of rollback-sandboxes", func() (bool, error) {
		ops, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "rollback-sandboxes", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionProgressing)
		return ops.Spec.Paused && c != nil && c.Reason == "NoBackup" && strings.HasSuffix(c.Message, "The sandboxes: "+strings.Join(names, ", ")),
			fmt.Errorf("paused %v, Progressing %+v", ops.Spec.Paused, c)
	})
	for _, n := range names {
		pod, _ := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if pod.UID != pods[n] || workspaceFile(t, s, ns, n) != "data-"+n {
			t.Fatalf("%s: pod replaced or workspace lost while molt held the rollback", n)
		}
	}
	// Without a terminal (a CI log), status says why it is paused too.
	if out, errOut, code := molt(t, "", "status", "rollback-sandboxes", "-n", ns); code != 0 || !strings.Contains(out, "Progressing: molt paused this ops") {
		t.Errorf("status of the paused rollback, no terminal: exit %d, want the Progressing message:\n%s%s", code, out, errOut)
	}
	kubectl(t, "", "delete", "suo", "rollback-sandboxes", "-n", ns, "--wait=true", "--timeout=60s")

	// The same upgrade without hooks loses the workspace.
	kubectl(t, opsYAML("no-hooks", pool, "5", "my-registry/sandbox-image:v3"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "no-hooks", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)
	for _, n := range names {
		if got := workspaceFile(t, s, ns, n); got != "" {
			t.Errorf("%s: workspace survived an upgrade without hooks: %q", n, got)
		}
	}
}

// TestSeedOpenClawBackup applies seed 001's OpenClaw example verbatim:
// /root/.openclaw is archived to the persistent /backup and restored.
func TestSeedOpenClawBackup(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	names := workspaceSandboxes(t, s, ns, "claw", "openclaw-sbs", "/backup", "/data/$NAME/backup", 3)
	kubectl(t, seed(t, "001-01-sandboxupdateops-upgrade-demo.yaml"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "upgrade-demo", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)
	for _, n := range names {
		out, _ := sh(t, s, ns, n, "cat /root/.openclaw/state")
		if strings.TrimSpace(out) != "claw-"+n {
			t.Errorf("%s: /root/.openclaw/state = %q, want claw-%s", n, out, n)
		}
		pod, _ := s.env.Kube.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{})
		if img := pod.Spec.Containers[0].Image; img != "ghcr.io/openclaw/openclaw:2026.4.11" {
			t.Errorf("%s: image %s", n, img)
		}
	}
}

func hookOps(name, pool, image, pre, post string, timeout int) string {
	y := opsYAML(name, pool, "1", image)
	if image == "" {
		y = fmt.Sprintf("apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxUpdateOps\nmetadata:\n  name: %s\nspec:\n  selector:\n    matchLabels:\n      %s: %s\n", name, poolLabel, pool)
	}
	if pre == "" && post == "" {
		return y
	}
	y += "  lifecycle:\n"
	for _, h := range []struct{ name, script string }{{"preUpgrade", pre}, {"postUpgrade", post}} {
		if h.script == "" {
			continue
		}
		y += fmt.Sprintf("    %s:\n      exec:\n        command: [\"/bin/bash\", \"-c\", %q]\n      timeoutSeconds: %d\n", h.name, h.script, timeout)
	}
	return y
}

const (
	backupHook  = `echo run >> /mnt/shared/pre-runs-$(hostname); tar czf /mnt/shared/ws-$(hostname).tgz -C /home/user/workspace .`
	restoreHook = `tar xzf /mnt/shared/ws-$(hostname).tgz -C /home/user/workspace && rm -f /mnt/shared/ws-$(hostname).tgz`
)

func upgradingCondition(t *testing.T, s *stack, ns, name string) *metav1.Condition {
	sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
}

func TestPreUpgradeFailureLeavesThePodAlone(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "pre", "pre-pool", "/mnt/shared", "/data/shared", 1)
	before, _ := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "pre-00", metav1.GetOptions{})
	kubectl(t, hookOps("pre", "pre-pool", "my-registry/sandbox-image:v2", `echo disk full >&2; exit 1`, "", 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "pre", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	c := upgradingCondition(t, s, ns, "pre-00")
	if c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed || !strings.Contains(c.Message, "exit code 1") || !strings.Contains(c.Message, "disk full") {
		t.Fatalf("Upgrading = %+v, want PreUpgradeFailed with exit code 1 and stderr", c)
	}
	after, _ := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "pre-00", metav1.GetOptions{})
	if after.UID != before.UID {
		t.Fatalf("pod was replaced after a failed preUpgrade: %s -> %s", before.UID, after.UID)
	}
	if got := workspaceFile(t, s, ns, "pre-00"); got != "data-pre-00" {
		t.Fatalf("workspace after failed preUpgrade = %q", got)
	}
}

// TestRollbackAfterPreUpgradeFailedKeepsThePod: as guide 001 says, after a
// PreUpgradeFailed an ops with only the old image rolls the sandbox back without
// hooks: its pod was never rebuilt, so it is kept, with its files, not replaced by
// an identical pod that starts from an empty filesystem.
func TestRollbackAfterPreUpgradeFailedKeepsThePod(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "rb", "rb-pool", "/mnt/shared", "/data/shared", 1)
	before, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "rb-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, hookOps("up", "rb-pool", "my-registry/sandbox-image:v2", `echo no space >&2; exit 1`, "", 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "up", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	kubectl(t, "", "delete", "suo", "up", "-n", ns, "--wait=true", "--timeout=60s")
	kubectl(t, hookOps("rollback", "rb-pool", "my-registry/sandbox-image:v1", "", "", 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "rollback", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	after, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "rb-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID || after.Spec.Containers[0].Image != "my-registry/sandbox-image:v1" {
		t.Fatalf("pod after the rollback: uid %s image %s; want the same pod %s on v1", after.UID, after.Spec.Containers[0].Image, before.UID)
	}
	if got := workspaceFile(t, s, ns, "rb-00"); got != "data-rb-00" {
		t.Fatalf("workspace after the rollback = %q, want data-rb-00", got)
	}
	if c := upgradingCondition(t, s, ns, "rb-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonSucceeded {
		t.Fatalf("Upgrading = %+v, want Succeeded", c)
	}
}

// TestFixPostUpgradeWithANewOps: a failing postUpgrade, then (as the guides
// say) delete the ops and create one with only a fixed postUpgrade.
func TestFixPostUpgradeWithANewOps(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "post", "post-pool", "/mnt/shared", "/data/shared", 1)
	kubectl(t, hookOps("broken", "post-pool", "my-registry/sandbox-image:v2", backupHook, `echo restore failed >&2; exit 7`, 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "broken", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	if c := upgradingCondition(t, s, ns, "post-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPostUpgradeFailed || !strings.Contains(c.Message, "exit code 7") {
		t.Fatalf("Upgrading = %+v, want PostUpgradeFailed exit code 7", c)
	}
	kubectl(t, "", "delete", "suo", "broken", "-n", ns, "--wait=true", "--timeout=60s")
	kubectl(t, hookOps("fix", "post-pool", "", "", restoreHook, 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "fix", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if c := upgradingCondition(t, s, ns, "post-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonSucceeded {
		t.Fatalf("Upgrading = %+v, want Succeeded", c)
	}
	if got := workspaceFile(t, s, ns, "post-00"); got != "data-post-00" {
		t.Fatalf("workspace after the fix = %q", got)
	}
	if out, _ := sh(t, s, ns, "post-00", "cat /mnt/shared/pre-runs-$(hostname)"); strings.Count(out, "run") != 1 {
		t.Fatalf("preUpgrade ran %d times, want once", strings.Count(out, "run"))
	}
}

// TestResumeAfterBadImage: UpgradePodFailed, then a new ops with a good
// image and only postUpgrade continues from UpgradePod.
func TestResumeAfterBadImage(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "img", "img-pool", "/mnt/shared", "/data/shared", 1)
	kubectl(t, hookOps("bad", "img-pool", "my-registry/sandbox-image:non-existent", backupHook, restoreHook, 30), "apply", "-n", ns, "-f", "-")
	bad := waitOps(t, s, ns, "bad", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	if c := upgradingCondition(t, s, ns, "img-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed {
		t.Fatalf("Upgrading = %+v, want UpgradePodFailed", c)
	}
	// The patch's image is the cause: the ops says so, not to retry it.
	if c := meta.FindStatusCondition(bad.Status.Conditions, agentsv1alpha1.ConditionProgressing); c == nil ||
		!strings.Contains(c.Message, "the patch's image my-registry/sandbox-image:non-existent (container sandbox) cannot be pulled") {
		t.Errorf("Progressing of the failed ops = %+v, want it to name the image the patch sets as the cause", c)
	}
	// So do the sandbox's MESSAGE and `kubectl molt retry` (a walk followed
	// the sandbox's "retry resumes it" and failed the same way).
	if sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), "img-00", metav1.GetOptions{}); err != nil ||
		!strings.Contains(sb.Status.Message, "`kubectl molt retry` fails the same way") || strings.Contains(sb.Status.Message, "resumes it from the failed step") {
		t.Errorf("img-00's message = %q (%v), want it to say a retry fails the same way", sb.Status.Message, err)
	}
	out, errOut, code := molt(t, "", "retry", "bad", "-n", ns)
	if code != 0 || !strings.Contains(out, "warning: the patch's image my-registry/sandbox-image:non-existent (container sandbox) cannot be pulled") ||
		!strings.Contains(out, "kubectl molt abort bad-retry -n "+ns) {
		t.Errorf("retry of an ops whose image does not pull: exit %d, want 0 and a warning naming the image and how to stop it:\n%s%s", code, out, errOut)
	}
	waitOps(t, s, ns, "bad-retry", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	kubectl(t, "", "delete", "suo", "bad-retry", "-n", ns, "--wait=true", "--timeout=60s")
	kubectl(t, hookOps("good", "img-pool", "my-registry/sandbox-image:v2", "", restoreHook, 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "good", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if got := workspaceFile(t, s, ns, "img-00"); got != "data-img-00" {
		t.Fatalf("workspace after resume = %q", got)
	}
	if out, _ := sh(t, s, ns, "img-00", "cat /mnt/shared/pre-runs-$(hostname)"); strings.Count(out, "run") != 1 {
		t.Fatalf("preUpgrade ran %d times, want once", strings.Count(out, "run"))
	}
}

func TestHookTimeout(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "slow", "slow-pool", "/mnt/shared", "/data/shared", 1)
	kubectl(t, hookOps("slow", "slow-pool", "my-registry/sandbox-image:v2", "sleep 30", "", 2), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "slow", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	if c := upgradingCondition(t, s, ns, "slow-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed || !strings.Contains(c.Message, "timed out after 2 seconds") {
		t.Fatalf("Upgrading = %+v, want PreUpgradeFailed timed out after 2 seconds", c)
	}
}

// Seed 001's "continue after UpgradePodFailed" ops (the patch and only a
// postUpgrade), applied while the failed ops left sandboxes unstarted, says
// at once which sandboxes it would give a new pod with no backup of theirs
// (PostUpgradeWithoutBackup, and kubectl molt plan): the unstarted ones, not
// the one resuming after its backup. Applied paused here, it touches nothing.
func TestContinueWithoutPreUpgradeNamesTheUnbackedSandboxes(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "cw", "cw-pool", "/mnt/shared", "/data/"+ns+"/$NAME/shared", 3)
	kubectl(t, hookOps("cw", "cw-pool", "my-registry/sandbox-image:non-existent", backupHook, restoreHook, 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "cw", agentsv1alpha1.SandboxUpdateOpsFailed, 3*time.Minute)
	if c := upgradingCondition(t, s, ns, "cw-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed {
		t.Fatalf("cw-00 Upgrading = %+v, want UpgradePodFailed", c)
	}
	cont := hookOps("cw-continue", "cw-pool", "my-registry/sandbox-image:v2", "", restoreHook, 30) + "  paused: true\n"
	file := filepath.Join(t.TempDir(), "continue.yaml")
	if err := os.WriteFile(file, []byte(cont), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := molt(t, "", "plan", "-f", file, "-n", ns)
	if code != 0 || !strings.Contains(out, "warning: this ops has a postUpgrade hook but no preUpgrade: 2 sandboxes (cw-01, cw-02)") ||
		!regexp.MustCompile(`(?m)^\s+cw-01\s.*no backup`).MatchString(out) || regexp.MustCompile(`(?m)^\s+cw-00\s.*no backup`).MatchString(out) {
		t.Errorf("plan exit %d: want the warning naming cw-01 and cw-02 only:\n%s\n%s", code, out, errOut)
	}
	kubectl(t, cont, "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, 30*time.Second, "PostUpgradeWithoutBackup on cw-continue", func() (bool, error) {
		ops, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(context.Background(), "cw-continue", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ops.Status.Conditions, "PostUpgradeWithoutBackup")
		if c == nil {
			return false, fmt.Errorf("conditions %+v", ops.Status.Conditions)
		}
		if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "2 sandboxes (cw-01, cw-02)") {
			t.Fatalf("PostUpgradeWithoutBackup = %+v, want True naming cw-01 and cw-02 only", c)
		}
		return true, nil
	})

	// Resumed by the user, molt pauses it again before its first sandbox,
	// naming the two: nothing is claimed, no pod replaced.
	podUID := func(name string) types.UID {
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pod.UID
	}
	pods := map[string]types.UID{}
	for _, name := range []string{"cw-01", "cw-02"} {
		pods[name] = podUID(name)
	}
	resume := func() {
		kubectl(t, "", "patch", "suo", "cw-continue", "-n", ns, "--type", "merge", "-p", `{"spec":{"paused":false}}`)
	}
	resume()
	testenv.Eventually(t, 30*time.Second, "molt's NoBackup pause of cw-continue", func() (bool, error) {
		ops, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(context.Background(), "cw-continue", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionProgressing)
		return ops.Spec.Paused && c != nil && c.Reason == "NoBackup" && strings.HasSuffix(c.Message, "The sandboxes: cw-01, cw-02"),
			fmt.Errorf("paused %v, Progressing %+v", ops.Spec.Paused, c)
	})
	for name, uid := range pods {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" || podUID(name) != uid {
			t.Fatalf("%s claimed by %q or its pod replaced while molt held the ops", name, sb.Labels[agentsv1alpha1.LabelUpdateOps])
		}
	}
	// Resumed again, it goes on: the user has said those workspaces may go.
	resume()
	testenv.Eventually(t, 60*time.Second, "cw-continue admitting after the second resume", func() (bool, error) {
		list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(context.Background(), metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelUpdateOps + "=cw-continue"})
		if err != nil {
			return false, err
		}
		return len(list.Items) > 0, fmt.Errorf("no sandbox claimed by cw-continue yet")
	})
}

// TestRollbackWithoutHooksHoldsTheUpgradedSandboxes: guide 001's rollback
// after a PreUpgradeFailed (the old image, no hooks) would give the sandboxes
// that had upgraded a new pod, and their workspace, restored into the pod by
// their last upgrade, with it. molt pauses the rollback before its first
// sandbox naming them (not the failed one), and touches nothing.
func TestRollbackWithoutHooksHoldsTheUpgradedSandboxes(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "wr", "wr-pool", "/mnt/shared", "/data/"+ns+"/$NAME/shared", 2)
	pre := `if [ "$(hostname)" = wr-01 ]; then echo no space >&2; exit 1; fi; ` + backupHook
	kubectl(t, hookOps("up", "wr-pool", "my-registry/sandbox-image:v2", pre, restoreHook, 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "up", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	if c := upgradingCondition(t, s, ns, "wr-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonSucceeded {
		t.Fatalf("wr-00 Upgrading = %+v, want Succeeded", c)
	}
	kubectl(t, "", "delete", "suo", "up", "-n", ns, "--wait=true", "--timeout=60s")
	before, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "wr-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, hookOps("rollback", "wr-pool", "my-registry/sandbox-image:v1", "", "", 30), "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, 30*time.Second, "molt's NoBackup pause of the rollback", func() (bool, error) {
		ops, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "rollback", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionProgressing)
		return ops.Spec.Paused && c != nil && c.Reason == "NoBackup" && strings.HasSuffix(c.Message, "The sandboxes: wr-00"),
			fmt.Errorf("paused %v, Progressing %+v", ops.Spec.Paused, c)
	})
	after, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "wr-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID {
		t.Fatalf("wr-00's pod replaced while molt held the rollback")
	}
	if got := workspaceFile(t, s, ns, "wr-00"); got != "data-wr-00" {
		t.Fatalf("wr-00's workspace = %q, want data-wr-00", got)
	}
}

// TestRollbackWithRestoreAfterPreUpgradeFailedIsNotHeld: guide 000's rollback
// (the old image, a postUpgrade that restores if a backup is there) after a
// PreUpgradeFailed keeps the failed sandbox's pod, since the patched template
// is the one it was built from: nothing would be lost, so molt does not
// pause it for want of a backup; it completes with the pod untouched. The
// failed preUpgrade left an archive behind (cut short, or, here, of other
// files): the kept pod's live workspace is not overwritten by a restore of
// it, as postUpgrade is not run on a pod that was not rebuilt, and the
// sandbox's Upgrading condition says so.
func TestRollbackWithRestoreAfterPreUpgradeFailedIsNotHeld(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "rr", "rr-pool", "/mnt/shared", "/data/"+ns+"/$NAME/shared", 1)
	before, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "rr-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	failingBackup := `stale=/mnt/shared/stale-$(hostname); mkdir -p $stale/sub && echo stale > $stale/sub/file.txt && tar czf /mnt/shared/ws-$(hostname).tgz -C $stale .; echo no space >&2; exit 1`
	kubectl(t, hookOps("up", "rr-pool", "my-registry/sandbox-image:v2", failingBackup, "", 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "up", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	kubectl(t, "", "delete", "suo", "up", "-n", ns, "--wait=true", "--timeout=60s")
	restore := `if [ -f /mnt/shared/ws-$(hostname).tgz ]; then ` + restoreHook + `; fi`
	kubectl(t, hookOps("rollback", "rr-pool", "my-registry/sandbox-image:v1", "", restore, 30), "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "rollback", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if _, held := ops.Annotations["molt.dev/no-backup"]; held {
		t.Errorf("the rollback was paused for want of a backup: %v", ops.Annotations)
	}
	after, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "rr-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID {
		t.Fatalf("rr-00's pod replaced by the rollback: uid %s, was %s", after.UID, before.UID)
	}
	if got := workspaceFile(t, s, ns, "rr-00"); got != "data-rr-00" {
		t.Fatalf("rr-00's workspace = %q, want data-rr-00 (the failed preUpgrade's archive restored over it?)", got)
	}
	if c := upgradingCondition(t, s, ns, "rr-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonSucceeded || !strings.Contains(c.Message, "postUpgrade was not run") {
		t.Errorf("rr-00's Upgrading condition = %+v, want Succeeded saying postUpgrade was not run on the kept pod", c)
	}
}

// A user's edit of a sandbox's image while its ops backs the sandbox up
// undoes the ops's patch: the pod is not replaced from the edited template
// and counted as updated. UpgradePod fails, naming the edit and both ways
// on, and the old pod keeps running with its workspace.
func TestImageEditedMidUpgradeIsNotCountedUpdated(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "ed", "ed-pool", "/mnt/shared", "/data/"+ns+"/$NAME/shared", 1)
	before, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "ed-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, hookOps("up", "ed-pool", "my-registry/sandbox-image:v2", "sleep 8; "+backupHook, "", 60), "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, time.Minute, "ed-00 in PreUpgrade", func() (bool, error) {
		c := upgradingCondition(t, s, ns, "ed-00")
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonPreUpgrade, fmt.Errorf("Upgrading %+v", c)
	})
	kubectl(t, "", "patch", "sbx", "ed-00", "-n", ns, "--type=json", "-p", `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"my-registry/sandbox-image:v3"}]`)
	ops := waitOps(t, s, ns, "up", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	if ops.Status.UpdatedReplicas != 0 || ops.Status.FailedReplicas != 1 {
		t.Errorf("ops counts %d updated, %d failed; want 0 and 1", ops.Status.UpdatedReplicas, ops.Status.FailedReplicas)
	}
	c := upgradingCondition(t, s, ns, "ed-00")
	if c == nil || c.Reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed || !strings.Contains(c.Message, "no longer carries the patch") ||
		!strings.Contains(c.Message, "my-registry/sandbox-image:v3") || !strings.Contains(c.Message, "kubectl molt retry up") {
		t.Errorf("ed-00's Upgrading condition = %+v, want UpgradePodFailed naming the edit and the ways on", c)
	}
	after, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "ed-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID {
		t.Errorf("ed-00's pod replaced from the edited template: uid %s, was %s", after.UID, before.UID)
	}
	if got := workspaceFile(t, s, ns, "ed-00"); got != "data-ed-00" {
		t.Errorf("ed-00's workspace = %q, want data-ed-00", got)
	}
}

// A sandbox whose ops label is removed while its upgrade is in a stage (by
// hand, or by a `kubectl replace` of a manifest without it) gets it back, and
// its upgrade runs to its end, counted by its ops. Before, every stage skipped
// it as no longer the ops's, the ops completed without it (TOTAL went down),
// and the watchdog failed it with its template patched and its old pod left.
func TestOpsLabelRemovedMidUpgradeIsPutBack(t *testing.T) {
	s, ns := removeOpsLabelAt(t, "lb", 1, agentsv1alpha1.UpgradingReasonPreUpgrade)
	sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), "lb-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := upgradingCondition(t, s, ns, "lb-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonSucceeded || sb.Labels[agentsv1alpha1.LabelUpdateOps] != "up" {
		t.Errorf("lb-00: Upgrading %+v, label %q; want Succeeded, labelled up", c, sb.Labels[agentsv1alpha1.LabelUpdateOps])
	}
	if got := workspaceFile(t, s, ns, "lb-00"); got != "data-lb-00" {
		t.Errorf("lb-00's workspace = %q, want data-lb-00", got)
	}
}

// A sandbox whose ops label is removed after its upgrade succeeded, while the
// ops still upgrades others, stays counted as updated: TOTAL and UPDATED do
// not go down, and the ops completes counting it. Before, it left the counts
// and the ops completed with a smaller TOTAL. (maxUnavailable 1: the second
// sandbox waits while the first upgrades, then takes 8 s.)
func TestOpsLabelRemovedAfterSuccessStaysCounted(t *testing.T) {
	removeOpsLabelAt(t, "ls", 2, agentsv1alpha1.UpgradingReasonSucceeded)
}

// removeOpsLabelAt makes n sandboxes prefix-NN with workspaces, upgrades them
// with ops "up" (an 8-second preUpgrade, maxUnavailable 1), takes the ops
// label off prefix-00 once its Upgrading reason is reason, and checks the ops
// completes counting all n as updated.
func removeOpsLabelAt(t *testing.T, prefix string, n int, reason string) (*stack, string) {
	t.Helper()
	s := Stack(t)
	ns := s.env.Namespace(t)
	first := prefix + "-00"
	workspaceSandboxes(t, s, ns, prefix, prefix+"-pool", "/mnt/shared", "/data/"+ns+"/$NAME/shared", n)
	kubectl(t, hookOps("up", prefix+"-pool", "my-registry/sandbox-image:v2", "sleep 8; "+backupHook, restoreHook, 60), "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, 2*time.Minute, first+" in "+reason, func() (bool, error) {
		c := upgradingCondition(t, s, ns, first)
		return c != nil && c.Reason == reason, fmt.Errorf("Upgrading %+v", c)
	})
	kubectl(t, "", "label", "sbx", first, "-n", ns, agentsv1alpha1.LabelUpdateOps+"-")
	ops := waitOps(t, s, ns, "up", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)
	if ops.Status.Replicas != int32(n) || ops.Status.UpdatedReplicas != int32(n) {
		t.Errorf("ops counts %d total, %d updated; want %d and %d", ops.Status.Replicas, ops.Status.UpdatedReplicas, n, n)
	}
	return s, ns
}

// A sandbox whose ops label is removed mid-upgrade while its ops is being
// deleted: the ops waits for it, it gets its label back, and its upgrade ends
// Succeeded with its workspace; then the ops goes. Before, the release did not
// see it (no label), and podcycler did not report its new pod (not the pod's
// ops's): it stayed in UpgradePod until the watchdog failed it, 20 minutes on
// the local stack (walk).
func TestOpsDeletedAfterALabelRemovedMidUpgrade(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "ld", "ld-pool", "/mnt/shared", "/data/"+ns+"/$NAME/shared", 1)
	kubectl(t, hookOps("up", "ld-pool", "my-registry/sandbox-image:v2", "sleep 8; "+backupHook, restoreHook, 60), "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, 2*time.Minute, "ld-00 in PreUpgrade", func() (bool, error) {
		c := upgradingCondition(t, s, ns, "ld-00")
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonPreUpgrade, fmt.Errorf("Upgrading %+v", c)
	})
	// Deleted first (it waits for ld-00, in a stage), then the label goes:
	// the selector, releasing, no longer syncs the ops as a live one.
	kubectl(t, "", "delete", "suo", "up", "-n", ns, "--wait=false")
	// Once the services have seen the delete (statusagg says what it waits
	// for; the selector's informer is as fast): a label removed before that
	// is put back by the selector syncing the ops as a live one.
	testenv.Eventually(t, 30*time.Second, "ops up Deleting", func() (bool, error) {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "up", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(o.Status.Conditions, agentsv1alpha1.ConditionDeleting)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Errorf("Deleting %+v", c)
	})
	time.Sleep(time.Second) // the selector's own informer, which no condition shows
	kubectl(t, "", "label", "sbx", "ld-00", "-n", ns, agentsv1alpha1.LabelUpdateOps+"-")
	testenv.Eventually(t, 3*time.Minute, "ld-00 Succeeded and ops up gone", func() (bool, error) {
		c := upgradingCondition(t, s, ns, "ld-00")
		_, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "up", metav1.GetOptions{})
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonSucceeded && apierrors.IsNotFound(err),
			fmt.Errorf("Upgrading %+v, ops get: %v", c, err)
	})
	if got := workspaceFile(t, s, ns, "ld-00"); got != "data-ld-00" {
		t.Errorf("ld-00's workspace = %q, want data-ld-00", got)
	}
	sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "ld-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := sb.Labels[agentsv1alpha1.LabelUpdateOps]; ok {
		t.Errorf("ld-00 still labelled %s=%s after its ops was released", agentsv1alpha1.LabelUpdateOps, v)
	}
}

// A backup script whose last command succeeds exits 0 even when its archive
// could not be written (here /mnt/none is no volume: the mistake a walk made
// with seed 000 on sandboxes without /mnt/shared). molt cannot tell, but it
// no longer hides what the hooks wrote to stderr: the history's prehook-done
// row and the sandbox's Succeeded condition (postUpgrade) carry it.
func TestHookThatSucceedsWithStderrSaysSo(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "se", "se-pool", "/backup", "/data/$NAME/backup", 1)
	kubectl(t, hookOps("se-up", "se-pool", "my-registry/sandbox-image:v2",
		`tar czf /mnt/none/ws.tgz -C /home/user/workspace . ; echo "backup done"`,
		`tar xzf /mnt/none/ws.tgz -C /home/user/workspace ; echo "restore done"`, 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "se-up", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	c := upgradingCondition(t, s, ns, "se-00")
	if c == nil || c.Reason != agentsv1alpha1.UpgradingReasonSucceeded || !strings.Contains(c.Message, "postUpgrade exited 0 but wrote to stderr") || !strings.Contains(c.Message, "/mnt/none/ws.tgz") {
		t.Errorf("Upgrading condition %+v; want Succeeded saying postUpgrade wrote to stderr, with its words", c)
	}
	out, errOut, code := molt(t, "", append([]string{"history", ns + "/se-00"}, natsViewerFlags(t)...)...)
	if code != 0 || !strings.Contains(out, "preUpgrade exited 0 but wrote to stderr") {
		t.Errorf("history (exit %d) does not show preUpgrade's stderr:\n%s%s", code, out, errOut)
	}
	testenv.Eventually(t, 30*time.Second, "Warning Event PreUpgradeNote on se-00", func() (bool, error) {
		list, err := s.env.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=PreUpgradeNote"})
		return err == nil && len(list.Items) == 1 && list.Items[0].Type == "Warning" && list.Items[0].InvolvedObject.Name == "se-00" &&
			strings.Contains(list.Items[0].Message, "/mnt/none/ws.tgz"), err
	})
}

// Seed 000's upgrade-with-backup applied verbatim to sandboxes with no
// volume at /mnt/shared (a walk's mistake, twice): the backup cannot outlive
// the pod. kubectl molt plan warns and says molt would pause it; molt pauses
// the ops before its first sandbox (Progressing reason BackupNotOnVolume, a
// Warning Event of that name with the ways on, the condition
// BackupNotOnVolume), touching no pod; resumed (the hooks might send the
// backup elsewhere), it goes on.
func TestSeedBackupWithNoVolumeThereIsWarned(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	// The workspace on an emptyDir, a hostPath elsewhere, and no csi runtime
	// (which would mount external storage the template does not show).
	makeSandboxes(t, s, ns, "nv", 1, "my-sandbox-pool", func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.Runtimes = []agentsv1alpha1.RuntimeConfig{{Name: "agent-runtime"}}
		sb.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "elsewhere", MountPath: "/elsewhere"}, {Name: "workspace", MountPath: "/home/user/workspace"}}
		sb.Spec.Template.Spec.Volumes = []corev1.Volume{
			{Name: "elsewhere", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/" + sb.Name + "/elsewhere"}}},
			{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}
	})
	ops := strings.Replace(seed(t, "000-02-sandboxupdateops-upgrade-with-backup.yaml"), "  namespace: default\n", "", 1)
	out, errOut, code := molt(t, ops, "plan", "-f", "-", "-n", ns)
	if code != 0 || !strings.Contains(out, "warning: the preUpgrade and postUpgrade hooks name /mnt/shared, /home/user/workspace, none of which is on a volume of sandbox nv-00's template that outlives its pod") ||
		!strings.Contains(out, "molt would pause it before its first sandbox for this") {
		t.Errorf("plan (exit %d) does not warn of the backup off any volume, and of the pause:\n%s%s", code, out, errOut)
	}
	before, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "nv-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, ops, "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, time.Minute, "the ops paused before its first sandbox", func() (bool, error) {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "upgrade-with-backup", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		p := meta.FindStatusCondition(o.Status.Conditions, agentsv1alpha1.ConditionProgressing)
		return o.Spec.Paused && p != nil && p.Reason == agentsv1alpha1.ProgressingReasonBackupNotOnVolume &&
			strings.Contains(p.Message, "molt paused this ops before its first sandbox") && strings.Contains(p.Message, "/mnt/shared") &&
			o.Status.UpdatedReplicas == 0 && o.Status.UpdatingReplicas == 0, fmt.Errorf("paused %v, progressing %+v, status %+v", o.Spec.Paused, p, o.Status)
	})
	if now, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "nv-00", metav1.GetOptions{}); err != nil || now.UID != before.UID {
		t.Errorf("the pod of nv-00 was touched while the ops was paused (err %v)", err)
	}
	kubectl(t, "", "patch", "suo", "upgrade-with-backup", "-n", ns, "--type", "merge", "-p", `{"spec":{"paused":false}}`)
	done := waitOps(t, s, ns, "upgrade-with-backup", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if c := meta.FindStatusCondition(done.Status.Conditions, agentsv1alpha1.ConditionBackupNotOnVolume); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "/mnt/shared") {
		t.Errorf("ops condition %s = %+v; want True naming /mnt/shared", agentsv1alpha1.ConditionBackupNotOnVolume, c)
	}
	testenv.Eventually(t, 30*time.Second, "Warning Event BackupNotOnVolume on the ops", func() (bool, error) {
		list, err := s.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + agentsv1alpha1.ConditionBackupNotOnVolume})
		// The condition's own Event may come first, from a status written
		// before the pause; the pause's says how to go on.
		paused := err == nil && slices.ContainsFunc(list.Items, func(e corev1.Event) bool {
			return e.Type == "Warning" && e.InvolvedObject.Name == "upgrade-with-backup" && strings.Contains(e.Message, "molt paused this ops") &&
				strings.HasSuffix(e.Message, `--type merge -p '{"spec":{"paused":false}}')`)
		})
		return paused && len(list.Items) <= 2, fmt.Errorf("events %+v: %v", list, err)
	})
}
