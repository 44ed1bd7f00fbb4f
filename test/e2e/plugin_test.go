package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// moltCmd is bin/kubectl-molt against the test cluster, as a user runs it.
func moltCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	env := testenv.Get(t)
	bin := filepath.Join(env.RootDir, "bin", "kubectl-molt")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run `make build`", bin)
	}
	return exec.Command(bin, append([]string{"--kubeconfig=" + env.Kubeconfig}, args...)...)
}

// molt runs bin/kubectl-molt and returns its stdout, stderr and exit code.
func molt(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := moltCmd(t, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("kubectl molt %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// natsViewerFlags log kubectl molt in to the harness's NATS as viewer.
func natsViewerFlags(t *testing.T) []string {
	env := testenv.Get(t)
	return []string{"--nats-url=" + env.NATSURL, "--nats-user=viewer", "--nats-password-file=" + env.NATSPasswords.File("viewer")}
}

// tmuxPane runs a command in a detached tmux session on a server of its
// own (socket -L), in a 160x60 terminal. The command should end with a
// sleep so the pane stays, with its last screen, until the test ends
// (tmux's remain-on-exit, set after the start, loses the screen's first
// line).
type tmuxPane struct {
	t      *testing.T
	socket string
}

func newTmuxPane(t *testing.T, command string) *tmuxPane {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("tmux is missing: run `make test-tmux` (hack/tmux.sh installs Debian's tmux)")
	}
	p := &tmuxPane{t: t, socket: fmt.Sprintf("molt-e2e-%d", time.Now().UnixNano())}
	p.run("new-session", "-d", "-s", "molt", "-x", "160", "-y", "60", command)
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", p.socket, "kill-server").Run() })
	return p
}

func (p *tmuxPane) run(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", p.socket}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// capture is the pane's text now.
func (p *tmuxPane) capture() string { return p.run("capture-pane", "-p", "-t", "molt") }

// TestPluginStatus: `kubectl molt status -w` over a 50-sandbox upgrade in
// which one sandbox's preUpgrade fails, run twice at once: without a
// terminal (plain lines, one per change) and in a real terminal (a tmux
// pane, redrawn in place). Both end when the ops does, exit 1 and name the
// failed sandbox with its hook's stderr; the pane showed the bar and the
// stage counts, and they changed; -o json agrees with the ops's status and
// the sandboxes' conditions.
func TestPluginStatus(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "st", 50, "st-pool", nil)
	// st-13's backup fails once (its pod keeps /tmp, so a retry passes).
	pre := `sleep 1; if [ "$(hostname)" = st-13 ] && [ ! -e /tmp/failed-once ]; then touch /tmp/failed-once; echo "backup of $(hostname) failed: disk full" >&2; exit 3; fi`
	// 10 at a time keeps the test short.
	y := strings.Replace(hookOps("st", "st-pool", "my-registry/sandbox-image:v2", pre, "", 30), "maxUnavailable: 1\n", "maxUnavailable: 10\n", 1)
	kubectl(t, y, "apply", "-n", ns, "-f", "-")

	env := s.env
	bin := filepath.Join(env.RootDir, "bin", "kubectl-molt")
	pane := newTmuxPane(t, fmt.Sprintf("%s --kubeconfig=%s status st -n %s -w --slowest 3; echo EXIT=$?; sleep 600", bin, env.Kubeconfig, ns))

	plain := moltCmd(t, "status", "st", "-n", ns, "-w")
	var plainOut, plainErr bytes.Buffer
	plain.Stdout, plain.Stderr = &plainOut, &plainErr
	if err := plain.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- plain.Wait() }()

	// Read the pane while the upgrade runs.
	updatedRe := regexp.MustCompile(`(\d+)/50 updated`)
	stageRe := regexp.MustCompile(`(?m)^(PreUpgrade|UpgradePod|PostUpgrade)\s+(\d+)\s*$`)
	updatedSeen, stageSeen := map[string]bool{}, map[string]bool{}
	var screens []string
	var plainErrRun error
	deadline := time.After(5 * time.Minute)
poll:
	for {
		select {
		case plainErrRun = <-done:
			break poll
		case <-deadline:
			t.Fatalf("status -w did not end within 5 minutes; plain output so far:\n%s\npane:\n%s", plainOut.String(), pane.capture())
		case <-time.After(300 * time.Millisecond):
		}
		screen := pane.capture()
		if m := updatedRe.FindStringSubmatch(screen); m != nil && strings.Contains(screen, "[") && strings.Contains(screen, "STAGE") {
			updatedSeen[m[1]] = true
			var stages []string
			for _, sm := range stageRe.FindAllStringSubmatch(screen, -1) {
				stages = append(stages, sm[1]+"="+sm[2])
			}
			stageSeen[strings.Join(stages, ",")] = true
			if len(screens) == 0 || screens[len(screens)-1] != screen {
				screens = append(screens, screen)
			}
		}
	}
	code := 0
	if ee, ok := plainErrRun.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}

	// The real state.
	ops, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "st", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ops.Status.Phase != agentsv1alpha1.SandboxUpdateOpsFailed || ops.Status.UpdatedReplicas != 49 || ops.Status.FailedReplicas != 1 {
		t.Fatalf("ops status = %+v, want Failed with 49 updated and 1 failed", ops.Status)
	}
	if c := upgradingCondition(t, s, ns, "st-13"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed {
		t.Fatalf("st-13 Upgrading = %+v, want PreUpgradeFailed", c)
	}

	// Without a terminal: plain lines, exit 1, the failed sandbox and its stderr.
	t.Logf("plain output:\n%s%s", plainOut.String(), plainErr.String())
	if code != 1 {
		t.Errorf("status -w (plain) exit code %d, want 1\nstdout:\n%s\nstderr:\n%s", code, plainOut.String(), plainErr.String())
	}
	lines := strings.Split(strings.TrimSpace(plainOut.String()), "\n")
	if len(lines) < 3 {
		t.Errorf("plain output has %d lines, want one per change:\n%s", len(lines), plainOut.String())
	}
	if strings.Contains(plainOut.String(), "\x1b[") {
		t.Errorf("plain output has terminal escapes:\n%q", plainOut.String())
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "Failed: 49/50 updated, 1 failed, 0 updating, 0 not started") {
		t.Errorf("last plain line %q, want the final counts", last)
	}
	if !regexp.MustCompile(`FAILED st-13\s+PreUpgradeFailed\s+stderr: backup of st-13 failed: disk full`).MatchString(plainOut.String()) {
		t.Errorf("plain output does not name st-13 with its stderr:\n%s", plainOut.String())
	}
	if !strings.Contains(plainErr.String(), "kubectl molt retry st") {
		t.Errorf("plain stderr does not say what to do next:\n%s", plainErr.String())
	}

	// In a terminal: the bar and the stage counts were drawn and changed.
	testenv.Eventually(t, 10*time.Second, "the pane's command to exit", func() (bool, error) {
		return strings.Contains(pane.capture(), "EXIT="), nil
	})
	final := pane.capture()
	t.Logf("the last screen:\n%s", final)
	if !strings.Contains(final, "EXIT=1") {
		t.Errorf("status -w in the terminal did not exit 1:\n%s", final)
	}
	for _, want := range []string{"SandboxUpdateOps " + ns + "/st  Failed", "49/50 updated, 1 failed", "FAILED", "st-13", "PreUpgradeFailed", "stderr: backup of st-13 failed: disk full", "█"} {
		if !strings.Contains(final, want) {
			t.Errorf("the last screen lacks %q:\n%s", want, final)
		}
	}
	if colored := pane.run("capture-pane", "-p", "-e", "-t", "molt"); !regexp.MustCompile(`\x1b\[(0;)?31m[^\n]*PreUpgradeFailed`).MatchString(colored) || !strings.Contains(colored, "\x1b[31m") {
		t.Errorf("the terminal view does not show the failure in red:\n%q", colored)
	}
	if len(updatedSeen) < 3 {
		t.Errorf("the pane showed %d distinct updated counts %v, want the bar moving (at least 3)", len(updatedSeen), updatedSeen)
	}
	if len(stageSeen) < 3 {
		t.Errorf("the pane showed %d distinct stage tables %v, want them changing (at least 3)", len(stageSeen), stageSeen)
	}
	if len(screens) > 1 {
		t.Logf("a screen during the upgrade:\n%s", screens[len(screens)/2])
	}

	// -o json: the machine-readable summary, against the real state.
	jsonOut, _, code := molt(t, "", "status", "st", "-n", ns, "-o", "json")
	if code != 1 {
		t.Errorf("status -o json exit code %d, want 1", code)
	}
	var sum struct {
		Phase                            string
		Total, Updated, Updating, Failed int
		NotStarted                       int                                              `json:"notStarted"`
		FailedSandboxes                  []struct{ Name, Reason, Message, Stderr string } `json:"failedSandboxes"`
	}
	if err := json.Unmarshal([]byte(jsonOut), &sum); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, jsonOut)
	}
	if sum.Phase != string(ops.Status.Phase) || sum.Total != int(ops.Status.Replicas) || sum.Updated != int(ops.Status.UpdatedReplicas) || sum.Failed != int(ops.Status.FailedReplicas) || sum.Updating != 0 || sum.NotStarted != 0 {
		t.Errorf("json summary %+v does not match the ops status %+v", sum, ops.Status)
	}
	failed, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelUpgradeFailed + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed.Items) != 1 || len(sum.FailedSandboxes) != 1 || sum.FailedSandboxes[0].Name != failed.Items[0].Name {
		t.Fatalf("json failed sandboxes %+v, the cluster's %d labelled failed", sum.FailedSandboxes, len(failed.Items))
	}
	if c := upgradingCondition(t, s, ns, "st-13"); sum.FailedSandboxes[0].Message != c.Message || sum.FailedSandboxes[0].Stderr != "backup of st-13 failed: disk full" {
		t.Errorf("json failed sandbox %+v, condition message %q", sum.FailedSandboxes[0], c.Message)
	}

	// retry of a PreUpgrade failure: a new ops with the same patch and hooks,
	// over st-13 alone (the 49 others already carry the patch).
	out, errOut, code := molt(t, "", "retry", "st", "-n", ns, "-w")
	t.Logf("retry:\n%s%s", out, errOut)
	if code != 0 || !strings.Contains(out, "created SandboxUpdateOps "+ns+"/st-retry with the same patch and hooks: retries 1 PreUpgradeFailed (st-13)") {
		t.Fatalf("retry -w exit %d:\n%s\n%s", code, out, errOut)
	}
	retried := waitOps(t, s, ns, "st-retry", agentsv1alpha1.SandboxUpdateOpsCompleted, 10*time.Second)
	if retried.Status.Replicas != 1 || retried.Spec.Lifecycle == nil || retried.Spec.Lifecycle.PreUpgrade == nil || string(retried.Spec.Patch.Raw) != string(ops.Spec.Patch.Raw) {
		t.Errorf("the retry ops %+v, want st's patch and hooks over 1 sandbox", retried)
	}
}

// TestPluginHistory: a sandbox whose first attempt fails in preUpgrade and
// whose second succeeds. `kubectl molt history` (as the NATS user viewer)
// lists both attempts, the failure with the hook's stderr, the second's
// stages in order with the recreated pod's UID, and the time per stage;
// --follow prints the second attempt's events as they happen.
func TestPluginHistory(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "hi", 1, "hi-pool", nil)
	makeSandboxes(t, s, ns, "quiet", 1, "quiet-pool", nil) // never upgraded
	kubectl(t, hookOps("hi-bad", "hi-pool", "my-registry/sandbox-image:v2", `echo "no space left on /backup" >&2; exit 2`, "", 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "hi-bad", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	kubectl(t, "", "delete", "suo", "hi-bad", "-n", ns, "--wait=true", "--timeout=60s")

	follow := moltCmd(t, append([]string{"history", ns + "/hi-00", "--follow"}, natsViewerFlags(t)...)...)
	var followOut syncBuffer
	follow.Stdout, follow.Stderr = &followOut, &followOut
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = follow.Process.Kill(); _ = follow.Wait() })
	testenv.Eventually(t, 30*time.Second, "history --follow to print the first attempt", func() (bool, error) {
		return strings.Contains(followOut.String(), "failed"), nil
	})

	kubectl(t, hookOps("hi-good", "hi-pool", "my-registry/sandbox-image:v2", "echo backing up", "echo restoring", 30), "apply", "-n", ns, "-f", "-")
	good := waitOps(t, s, ns, "hi-good", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "hi-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "history --follow to print the second attempt's end", func() (bool, error) {
		return strings.Contains(followOut.String(), "posthook-done"), nil
	})

	out, errOut, code := molt(t, "", append([]string{"history", ns + "/hi-00"}, natsViewerFlags(t)...)...)
	t.Logf("history:\n%s", out)
	if code != 0 {
		t.Fatalf("history exit code %d:\n%s\n%s", code, out, errOut)
	}
	attempts := strings.Split(out, "\nAttempt ")
	if len(attempts) != 3 {
		t.Fatalf("history shows %d attempts, want 2:\n%s", len(attempts)-1, out)
	}
	first, second := attempts[1], attempts[2]
	if !strings.Contains(first, "(ops hi-bad)") || !regexp.MustCompile(`failed\s+PreUpgrade\s+PreUpgradeFailed: hook stderr: no space left on /backup`).MatchString(first) ||
		!strings.Contains(first, "PreUpgradeFailed after") {
		t.Errorf("the first attempt does not show its preUpgrade failure with the hook's stderr:\n%s", first)
	}
	if !strings.HasPrefix(second, string(good.UID)+" (ops hi-good)") {
		t.Errorf("the second attempt is not hi-good's (uid %s):\n%s", good.UID, second)
	}
	// Every event in order, with the stage it belongs to.
	want := []string{
		`requested\s+-`, `patched\s+PreUpgrade`, `stage-started\s+PreUpgrade`, `prehook-done\s+PreUpgrade`,
		`stage-started\s+UpgradePod`, `pod-ready\s+UpgradePod\s+new pod ` + string(pod.UID),
		`stage-started\s+PostUpgrade`, `posthook-done\s+PostUpgrade`,
		`stages: PreUpgrade \S+, UpgradePod \S+, PostUpgrade \S+; Succeeded after`,
	}
	rest := second
	for _, w := range want {
		loc := regexp.MustCompile(w).FindStringIndex(rest)
		if loc == nil {
			t.Fatalf("the second attempt lacks %q after what came before it:\n%s", w, second)
		}
		rest = rest[loc[1]:]
	}
	if !strings.Contains(followOut.String(), "new pod "+string(pod.UID)) {
		t.Errorf("history --follow did not print the recreated pod:\n%s", followOut.String())
	}

	// A sandbox without events says so; a sandbox that does not exist (a
	// typo) is an error that says to check the name; a refused login names
	// the flags.
	out, _, code = molt(t, "", append([]string{"history", ns + "/quiet-00"}, natsViewerFlags(t)...)...)
	if code != 0 || !strings.Contains(out, "no events") {
		t.Errorf("history of a sandbox without events: exit %d\n%s", code, out)
	}
	out, errOut, code = molt(t, "", append([]string{"history", ns + "/nobody"}, natsViewerFlags(t)...)...)
	if code != 2 || !strings.Contains(errOut, "no such sandbox") || out != "" {
		t.Errorf("history of a sandbox that does not exist: exit %d, stderr %s, stdout (want none) %q", code, errOut, out)
	}
	bad := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(bad, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = molt(t, "", "history", ns+"/hi-00", "--nats-url="+s.env.NATSURL, "--nats-user=viewer", "--nats-password-file="+bad)
	if code != 2 || !strings.Contains(errOut, "with the password from --nats-password-file "+bad) {
		t.Errorf("history with a wrong password: exit %d, stderr %s", code, errOut)
	}
}

// syncBuffer is a bytes.Buffer safe for a process writing while the test
// reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

const planOps = `apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata:
  name: pl
spec:
  selector:
    matchLabels:
      agents.kruise.io/sandbox-template: plan-pool
  updateStrategy:
    maxUnavailable: 2
  patch:
    spec:
      containers:
      - name: sandbox
        image: my-registry/sandbox-image:v2
`

// TestPluginPlan: 8 sandboxes, a selector that matches 5 of them (one
// more is paused, one is a SandboxSet's pool member, one has another
// label). `kubectl molt plan` names the 5 in order and batches of
// maxUnavailable, each of the 3 others with its reason, and a diff that
// shows exactly the patched field; it changes nothing, and the selector
// then upgrades exactly those 5. An ops the API server refuses is refused
// with the server's words.
func TestPluginPlan(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "pl", 6, "plan-pool", nil)
	pause(t, s, ns, []string{"pl-05"})
	makeSandboxes(t, s, ns, "other", 1, "other-pool", nil)
	kubectl(t, `apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata:
  name: plan-pool
spec:
  replicas: 1
  template:
    spec:
      containers:
      - name: sandbox
        image: my-registry/sandbox-image:v1
`, "apply", "-n", ns, "-f", "-")
	var member string
	testenv.Eventually(t, 2*time.Minute, "the pool member Running", func() (bool, error) {
		list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelSandboxPool + "=plan-pool"})
		if err != nil || len(list.Items) != 1 {
			return false, fmt.Errorf("members %v: %v", list, err)
		}
		member = list.Items[0].Name
		return list.Items[0].Status.Phase == agentsv1alpha1.SandboxRunning, fmt.Errorf("phase %s", list.Items[0].Status.Phase)
	})
	all, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(all.Items) != 8 {
		t.Fatalf("namespace has %d sandboxes, want 8: %v", len(all.Items), err)
	}
	file := filepath.Join(t.TempDir(), "ops.yaml")
	if err := os.WriteFile(file, []byte(planOps), 0o600); err != nil {
		t.Fatal(err)
	}

	out, errOut, code := molt(t, "", "plan", "-f", file, "-n", ns)
	t.Logf("plan:\n%s", out)
	if code != 0 {
		t.Fatalf("plan exit code %d:\n%s\n%s", code, out, errOut)
	}
	selected, excluded, diff := section(out, "Selected (5)", "Excluded"), section(out, "Excluded (3)", "Pod template"), section(out, "Pod template of sandbox pl-00", "")
	for i, name := range []string{"pl-00", "pl-01", "pl-02", "pl-03", "pl-04"} {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^\s+%s\s+Running\s+%d\s*$`, name, i/2+1)).MatchString(selected) {
			t.Errorf("plan does not select %s in batch %d:\n%s", name, i/2+1, selected)
		}
	}
	if strings.Count(strings.TrimSpace(selected), "\n") != 6 { // heading, columns, 5 rows
		t.Errorf("selected section has other rows:\n%s", selected)
	}
	for _, w := range []string{
		`pl-05\s+StateFilter\s+phase Paused is not in spec.stateFilter.states \[Running\]`,
		member + `\s+PoolMember\s+a member of SandboxSet plan-pool's warm pool`,
		`other-00\s+SelectorMismatch\s+its labels do not match spec.selector \(agents.kruise.io/sandbox-template=plan-pool\)`,
	} {
		if !regexp.MustCompile(w).MatchString(excluded) {
			t.Errorf("excluded section lacks %q:\n%s", w, excluded)
		}
	}
	var changed []string
	for _, l := range strings.Split(diff, "\n") {
		if (strings.HasPrefix(l, "-") || strings.HasPrefix(l, "+")) && !strings.HasPrefix(l, "---") && !strings.HasPrefix(l, "+++") {
			changed = append(changed, strings.TrimSpace(l))
		}
	}
	if want := []string{"-  - image: my-registry/sandbox-image:v1", "+  - image: my-registry/sandbox-image:v2"}; strings.Join(changed, "\n") != strings.Join(want, "\n") {
		t.Errorf("diff changes %q, want exactly the image:\n%s", changed, diff)
	}
	out, _, _ = molt(t, "", "plan", "-f", file, "-n", ns, "--all")
	if n := strings.Count(out, "Pod template of sandbox "); n != 5 {
		t.Errorf("plan --all shows %d diffs, want 5:\n%s", n, out)
	}

	// Nothing changed; then the selector does what plan said.
	if list, _ := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Fatalf("plan left %d ops behind", len(list.Items))
	}
	kubectl(t, planOps, "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "pl", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)
	if ops.Status.Replicas != 5 || ops.Status.UpdatedReplicas != 5 {
		t.Errorf("ops status %+v, want the 5 plan named", ops.Status)
	}
	for _, n := range []string{"pl-05", member, "other-00"} {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img := sb.Spec.Template.Spec.Containers[0].Image; img != "my-registry/sandbox-image:v1" {
			t.Errorf("excluded %s was upgraded to %s", n, img)
		}
	}
	kubectl(t, "", "delete", "suo", "pl", "-n", ns, "--wait=true", "--timeout=60s")

	// Refused as the API server refuses it, with its words.
	bad := strings.Replace(planOps, "maxUnavailable: 2", `maxUnavailable: "abc"`, 1)
	_, errOut, code = molt(t, bad, "plan", "-f", "-", "-n", ns)
	apply := exec.Command(filepath.Join(s.env.RootDir, "bin", "kubectl"), "--kubeconfig="+s.env.Kubeconfig, "apply", "--dry-run=server", "-n", ns, "-f", "-")
	apply.Stdin = strings.NewReader(bad)
	applyOut, _ := apply.CombinedOutput()
	invalid := regexp.MustCompile(`is invalid: (.*)`)
	got, want := invalid.FindStringSubmatch(errOut), invalid.FindStringSubmatch(string(applyOut))
	if code != 1 || got == nil || want == nil || got[1] != want[1] {
		t.Errorf("plan of an invalid ops: exit %d, stderr %q; kubectl apply says %q", code, errOut, applyOut)
	}

	// A patch the API server accepts in an ops but whose pod it refuses: the
	// selector's patch check (InvalidPatch), found before anything exists.
	emptyImage := strings.Replace(planOps, "image: my-registry/sandbox-image:v2", `image: ""`, 1)
	_, errOut, code = molt(t, emptyImage, "plan", "-f", "-", "-n", ns)
	if code != 1 || !strings.Contains(errOut, "would fail with InvalidPatch before any sandbox is touched") || !strings.Contains(errOut, "spec.containers[0].image: Required value") {
		t.Errorf("plan of a patch that makes an invalid pod: exit %d, stderr %q", code, errOut)
	}
	if list, _ := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("plan of refused ops left %d ops behind", len(list.Items))
	}

	// A selector with a typo: the ops completes having upgraded nothing, and
	// `status -w` says so and exits 3, so `status -w && echo upgraded` does
	// not claim it; a Warning Event of the same reason is on the ops.
	typo := strings.Replace(strings.Replace(planOps, "name: pl", "name: typo", 1), "sandbox-template: plan-pool", "sandbox-template: plan-pol", 1)
	kubectl(t, typo, "apply", "-n", ns, "-f", "-")
	out, errOut, code = molt(t, "", "status", "typo", "-n", ns, "-w", "--interval=200ms")
	if code != 3 || !strings.Contains(errOut, "Completed without upgrading any sandbox (NothingSelected): nothing was upgraded") ||
		!strings.Contains(errOut, "8 do not match spec.selector (agents.kruise.io/sandbox-template=plan-pol)") {
		t.Errorf("status -w of an ops whose selector matches nothing: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	testenv.Eventually(t, 30*time.Second, "the NothingSelected Warning Event", func() (bool, error) {
		list, err := s.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=typo,reason=NothingSelected"})
		if err != nil || len(list.Items) != 1 {
			return false, fmt.Errorf("events %v: %v", list, err)
		}
		return list.Items[0].Type == corev1.EventTypeWarning, fmt.Errorf("type %s", list.Items[0].Type)
	})
}

// section is the text of out from the line starting with from up to the
// line starting with to (or the end).
func section(out, from, to string) string {
	i := strings.Index(out, "\n"+from)
	if i < 0 {
		return ""
	}
	rest := out[i+1:]
	if to != "" {
		if j := strings.Index(rest, "\n"+to); j >= 0 {
			return rest[:j+1]
		}
	}
	return rest
}

// TestPluginRetry: a postUpgrade that fails once (a transient failure)
// leaves the ops Failed with PostUpgradeFailed; `kubectl molt retry -w`
// replaces it with an ops carrying only the postUpgrade hook, which ends
// Completed (exit 0) without running preUpgrade again and restores the
// workspace.
func TestPluginRetry(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "rt", "rt-pool", "/mnt/shared", "/data/shared", 1)
	post := fmt.Sprintf(`m=/mnt/shared/post-once-%s-$(hostname); if [ ! -e $m ]; then touch $m; echo "restore interrupted" >&2; exit 7; fi; %s`, ns, restoreHook)
	kubectl(t, hookOps("rt", "rt-pool", "my-registry/sandbox-image:v2", backupHook, post, 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "rt", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	if c := upgradingCondition(t, s, ns, "rt-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPostUpgradeFailed {
		t.Fatalf("Upgrading = %+v, want PostUpgradeFailed", c)
	}

	out, errOut, code := molt(t, "", "retry", "rt", "-n", ns, "-w")
	t.Logf("retry:\n%s%s", out, errOut)
	if code != 0 {
		t.Fatalf("retry -w exit code %d, want 0 (the new ops Completed):\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "created SandboxUpdateOps "+ns+"/rt-retry with only the postUpgrade hook") || !strings.Contains(out, "retries 1 PostUpgradeFailed (rt-00)") {
		t.Errorf("retry does not say what it created:\n%s", out)
	}
	ops := waitOps(t, s, ns, "rt-retry", agentsv1alpha1.SandboxUpdateOpsCompleted, 10*time.Second)
	if ops.Spec.Lifecycle == nil || ops.Spec.Lifecycle.PreUpgrade != nil || ops.Spec.Lifecycle.PostUpgrade == nil || len(ops.Spec.Patch.Raw) != 0 || ops.Annotations["molt.dev/retry-of"] != "rt" {
		t.Errorf("the retry ops is not a postUpgrade-only retry of rt: %+v %v", ops.Spec, ops.Annotations)
	}
	if _, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(context.Background(), "rt", metav1.GetOptions{}); err == nil {
		t.Errorf("the failed ops rt is still there")
	}
	if out, _ := sh(t, s, ns, "rt-00", "cat /mnt/shared/pre-runs-$(hostname)"); strings.Count(out, "run") != 1 {
		t.Errorf("preUpgrade ran %d times, want once", strings.Count(out, "run"))
	}
	if got := workspaceFile(t, s, ns, "rt-00"); got != "data-rt-00" {
		t.Errorf("workspace after the retry = %q", got)
	}
	_, errOut, code = molt(t, "", "retry", "rt-retry", "-n", ns)
	if code != 2 || !strings.Contains(errOut, "is Completed: every sandbox it selected was updated, so there is nothing to retry") {
		t.Errorf("retry of a Completed ops: exit %d, %s", code, errOut)
	}
	out, errOut, code = molt(t, "", "abort", "rt-retry", "-n", ns)
	if code != 0 || !strings.Contains(out, "deleted SandboxUpdateOps "+ns+"/rt-retry, which had already Completed: 1 of 1 sandboxes updated") || strings.Contains(out, "paused") {
		t.Errorf("abort of a Completed ops: exit %d:\n%s%s", code, out, errOut)
	}
}

// TestPluginRetryCreatesBeforeItDeletes: retry creates the new ops before it
// deletes the failed one, so a user who may create ops but not delete them
// (or a retry cut off after the create) still has the retry: it says so and
// exits 2, the new ops runs to Completed beside the failed one left behind,
// and the workspace is kept. A second retry of the same ops changes nothing.
func TestPluginRetryCreatesBeforeItDeletes(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "rd", "rd-pool", "/mnt/shared", "/data/shared", 1)
	pre := fmt.Sprintf(`m=/mnt/shared/pre-once-%s-$(hostname); if [ ! -e $m ]; then touch $m; echo "backup interrupted" >&2; exit 7; fi; %s`, ns, backupHook)
	kubectl(t, hookOps("rd", "rd-pool", "my-registry/sandbox-image:v2", pre, restoreHook, 30), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "rd", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	if c := upgradingCondition(t, s, ns, "rd-00"); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed {
		t.Fatalf("Upgrading = %+v, want PreUpgradeFailed", c)
	}
	kubectl(t, `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: ops-creator
rules:
- apiGroups: [agents.kruise.io]
  resources: [sandboxupdateops]
  verbs: [get, list, watch, create]
- apiGroups: [agents.kruise.io]
  resources: [sandboxes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: ops-creator
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: ops-creator
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: ops-creator
`, "apply", "-n", ns, "-f", "-")
	asUser := "--kubeconfig=" + s.env.KubeconfigAs(t, "ops-creator")
	var out, errOut string
	var code int
	testenv.Eventually(t, 30*time.Second, "the Role in force", func() (bool, error) {
		out, errOut, code = molt(t, "", asUser, "retry", "rd", "-n", ns)
		return !strings.Contains(errOut, "forbidden") || strings.Contains(errOut, "delete"), nil
	})
	t.Logf("retry:\n%s%s", out, errOut)
	if code != 2 || !strings.Contains(out, "created SandboxUpdateOps "+ns+"/rd-retry with the same patch and hooks") ||
		!strings.Contains(errOut, "runs all the same") || !strings.Contains(errOut, "kubectl delete suo rd -n "+ns) {
		t.Fatalf("retry that may not delete: exit %d, want 2, saying the retry runs and how to delete the failed ops:\n%s\n%s", code, out, errOut)
	}
	waitOps(t, s, ns, "rd-retry", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	old, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(context.Background(), "rd", metav1.GetOptions{})
	if err != nil || old.Status.Phase != agentsv1alpha1.SandboxUpdateOpsFailed {
		t.Errorf("the failed ops left behind: %v, phase %v; want it kept, Failed", err, old)
	}
	if got := workspaceFile(t, s, ns, "rd-00"); got != "data-rd-00" {
		t.Errorf("workspace after the retry = %q", got)
	}
	_, errOut, code = molt(t, "", "retry", "rd", "-n", ns)
	if code != 2 || !strings.Contains(errOut, "already retries rd") {
		t.Errorf("a second retry of rd: exit %d, want 2 with already retries: %s", code, errOut)
	}
	if list, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).List(context.Background(), metav1.ListOptions{}); err != nil || len(list.Items) != 2 {
		t.Errorf("ops after a second retry: %v, want rd and rd-retry only (%v)", list, err)
	}
}

// TestPluginAbort: `kubectl molt abort` pauses an ops mid-way, waits for
// the sandbox in flight to finish its attempt, and deletes the ops: no
// sandbox is left in a stage, the ones never started keep their template.
func TestPluginAbort(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "ab", 4, "ab-pool", nil)
	kubectl(t, hookOps("ab", "ab-pool", "my-registry/sandbox-image:v2", "sleep 3", "", 30), "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, time.Minute, "a sandbox upgrading", func() (bool, error) {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "ab", metav1.GetOptions{})
		return err == nil && o.Status.UpdatingReplicas > 0, err
	})
	out, errOut, code := molt(t, "", "abort", "ab", "-n", ns)
	t.Logf("abort:\n%s%s", out, errOut)
	if code != 0 || !strings.Contains(out, "paused SandboxUpdateOps "+ns+"/ab") || !strings.Contains(out, "deleted SandboxUpdateOps "+ns+"/ab") {
		t.Fatalf("abort exit %d:\n%s\n%s", code, out, errOut)
	}
	if _, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "ab", metav1.GetOptions{}); err == nil {
		t.Fatal("the ops is still there after abort")
	}
	list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	upgraded := 0
	for _, sb := range list.Items {
		if sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" || sb.Status.Phase != agentsv1alpha1.SandboxRunning {
			t.Errorf("%s after abort: label %q, phase %s", sb.Name, sb.Labels[agentsv1alpha1.LabelUpdateOps], sb.Status.Phase)
		}
		if sb.Spec.Template.Spec.Containers[0].Image == "my-registry/sandbox-image:v2" {
			upgraded++
		}
	}
	if upgraded == 0 || upgraded == 4 {
		t.Errorf("%d of 4 sandboxes upgraded, want the ones in flight only", upgraded)
	}
	if !regexp.MustCompile(fmt.Sprintf(`%d updated, 0 failed, %d never started`, upgraded, 4-upgraded)).MatchString(out) {
		t.Errorf("abort's summary does not match the cluster (%d upgraded):\n%s", upgraded, out)
	}
}

// TestPluginInstall: `make install-plugin` puts kubectl-molt where PATH
// finds it, and `kubectl molt --help` lists the subcommands.
func TestPluginInstall(t *testing.T) {
	env := testenv.Get(t)
	dir := t.TempDir()
	mk := exec.Command("make", "install-plugin", "PLUGIN_DIR="+dir)
	mk.Dir = env.RootDir
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make install-plugin: %v\n%s", err, out)
	}
	cmd := exec.Command(filepath.Join(env.RootDir, "bin", "kubectl"), "molt", "--help")
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl molt --help: %v\n%s", err, out)
	}
	for _, sub := range []string{"status", "history", "plan", "retry", "abort"} {
		if !regexp.MustCompile(`(?m)^\s+` + sub + `\s`).Match(out) {
			t.Errorf("kubectl molt --help does not list %s:\n%s", sub, out)
		}
	}
	if !strings.Contains(string(out), "kubectl molt [command]") {
		t.Errorf("usage does not read `kubectl molt`:\n%s", out)
	}
}

// TestREADMEPluginTable: the kubectl molt tables of README.md and
// README.zh-CN.md list exactly the plugin's subcommands, and every flag
// they name is a flag of that subcommand.
func TestREADMEPluginTable(t *testing.T) {
	env := testenv.Get(t)
	out, _, code := molt(t, "", "--help")
	if code != 0 {
		t.Fatalf("kubectl molt --help exit %d", code)
	}
	var subs []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z]+)\s{2,}`).FindAllStringSubmatch(out, -1) {
		if m[1] != "completion" && m[1] != "help" {
			subs = append(subs, m[1])
		}
	}
	row := regexp.MustCompile("(?m)^\\| `kubectl molt ([a-z]+)[^`]*` \\|.*$")
	flagRe := regexp.MustCompile(`--[a-z][a-z-]+`)
	for _, file := range []string{"README.md", "README.zh-CN.md"} {
		data, err := os.ReadFile(filepath.Join(env.RootDir, file))
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for _, m := range row.FindAllStringSubmatch(string(data), -1) {
			listed = append(listed, m[1])
			help, _, _ := molt(t, "", m[1], "--help")
			for _, f := range flagRe.FindAllString(m[0], -1) {
				if !strings.Contains(help, f+" ") {
					t.Errorf("%s: the row of %s names %s, which `kubectl molt %s --help` does not list", file, m[1], f, m[1])
				}
			}
		}
		if strings.Join(listed, ",") != strings.Join(subs, ",") {
			t.Errorf("%s lists subcommands %v, kubectl molt has %v", file, listed, subs)
		}
	}
}

// TestPluginRetryLeavesSandboxesUpgradedSince: the README's way out of a bad
// image is a new ops with the image fixed; a `kubectl molt retry` of the old,
// failed ops afterwards must not put its broken patch over the sandboxes the
// fix upgraded (the failed one among them: its pod would be replaced again,
// its workspace left only in a backup). The retry refuses, names them and
// who upgraded them, and creates nothing.
func TestPluginRetryLeavesSandboxesUpgradedSince(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "rs", 3, "rs-pool", nil)
	kubectl(t, opsYAML("bad", "rs-pool", "1", "my-registry/sandbox-image:non-existent"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "bad", agentsv1alpha1.SandboxUpdateOpsFailed, 3*time.Minute)
	kubectl(t, opsYAML("fix", "rs-pool", "1", "my-registry/sandbox-image:v2"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "fix", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)

	out, errOut, code := molt(t, "", "retry", "bad", "-n", ns)
	t.Logf("retry:\n%s%s", out, errOut)
	if code != 2 || !strings.Contains(errOut, "that another upgrade went through since bad began") || !strings.Contains(errOut, "rs-00: Succeeded by ops fix") || !strings.Contains(errOut, "nothing was changed") {
		t.Errorf("retry of bad after fix upgraded its sandboxes: exit %d, want 2 naming them:\n%s%s", code, out, errOut)
	}
	list, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list.Items {
		if o.Name != "bad" && o.Name != "fix" {
			t.Errorf("the refused retry created ops %s", o.Name)
		}
	}
	for _, name := range []string{"rs-00", "rs-01", "rs-02"} {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img := sb.Spec.Template.Spec.Containers[0].Image; img != "my-registry/sandbox-image:v2" {
			t.Errorf("%s runs %s after the refused retry, want the fix's image", name, img)
		}
	}
}

// TestPluginRetryOfAnImagelessAddIsRefused: an ops whose patch is meant for a
// container the sandboxes name otherwise (it adds `main`, with no image, to
// sandboxes whose container is `sandbox`, and fits another) fails them before anything is
// changed; its failure and `kubectl molt retry` say that a retry, which keeps
// the patch, would fail them again, and send the user to a new ops. Before, the
// message offered the retry, which was created and failed InvalidPatch.
func TestPluginRetryOfAnImagelessAddIsRefused(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	// nm-00's container is main, as the patch says (the ops's patch check,
	// made on the first sandbox, passes); nm-01's and nm-02's is sandbox.
	makeSandboxes(t, s, ns, "nm", 3, "nm-pool", func(sb *agentsv1alpha1.Sandbox) {
		if sb.Name == "nm-00" {
			sb.Spec.Template.Spec.Containers[0].Name = "main"
		}
	})
	kubectl(t, `apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata: {name: env}
spec:
  selector: {matchLabels: {`+poolLabel+`: nm-pool}}
  updateStrategy: {maxUnavailable: 1}
  patch:
    spec:
      containers: [{name: main, env: [{name: MODE, value: fast}]}]
`, "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "env", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	var said []string
	for _, c := range ops.Status.Conditions {
		said = append(said, c.Message)
	}
	if all := strings.Join(said, "\n"); !strings.Contains(all, "adds containers/main with no image") || !strings.Contains(all, "would fail them again before their backup") {
		t.Errorf("the failed ops's conditions do not say a retry would fail:\n%s", all)
	}
	out, errOut, code := molt(t, "", "retry", "env", "-n", ns)
	t.Logf("retry:\n%s%s", out, errOut)
	if code != 2 || !strings.Contains(errOut, "cannot be retried, nothing was changed") || !strings.Contains(errOut, "adds containers/main with no image to nm-01") {
		t.Errorf("retry of an ops whose patch adds an imageless container: exit %d, want 2 saying why:\n%s%s", code, out, errOut)
	}
	list, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("the refused retry left %d ops, want only env", len(list.Items))
	}
}

// TestPluginRetryBesideAnImagelessAddSaysTheWayOnForBoth: when the patch fits
// some of the sandboxes a retry would start and adds a container with no image
// to others, `kubectl molt retry` changes nothing (the others would fail again,
// each taking a place of maxUnavailable) and says the way on for both groups;
// followed literally (the others labelled and left out of an ops with the same
// patch), the sandbox the patch fits is upgraded and the others are untouched.
func TestPluginRetryBesideAnImagelessAddSaysTheWayOnForBoth(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	// mx-00 and mx-02's container is main, as the patch says; mx-01's is sandbox.
	makeSandboxes(t, s, ns, "mx", 3, "mx-pool", func(sb *agentsv1alpha1.Sandbox) {
		if sb.Name != "mx-01" {
			sb.Spec.Template.Spec.Containers[0].Name = "main"
		}
	})
	ops := func(name, extra string) string {
		return `apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata: {name: ` + name + `}
spec:
  selector: {matchLabels: {` + poolLabel + `: mx-pool}` + extra + `}
  updateStrategy: {maxUnavailable: 1}
  patch:
    spec:
      containers: [{name: main, env: [{name: MODE, value: fast}]}]
`
	}
	file := filepath.Join(t.TempDir(), "mix.yaml")
	if err := os.WriteFile(file, []byte(ops("mix", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := molt(t, "", "plan", "-f", file, "-n", ns); code != 0 || !regexp.MustCompile(`mx-01\s.*fails: adds containers/main with no image`).MatchString(out) ||
		regexp.MustCompile(`mx-0[02]\s.*fails:`).MatchString(out) {
		t.Errorf("plan exit %d, want 0 marking mx-01 alone as failing for the imageless add:\n%s\n%s", code, out, errOut)
	}
	kubectl(t, ops("mix", ""), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "mix", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	out, errOut, code := molt(t, "", "retry", "mix", "-n", ns)
	t.Logf("retry:\n%s%s", out, errOut)
	if code != 2 || !strings.Contains(errOut, "cannot be retried, nothing was changed") || !strings.Contains(errOut, "no image to mx-01,") ||
		!strings.Contains(errOut, "for the others, create a SandboxUpdateOps with this patch whose selector leaves those out") {
		t.Fatalf("retry beside an imageless add: exit %d, want 2 naming mx-01 and the way on for the others:\n%s%s", code, out, errOut)
	}
	// The way on, as the message says it.
	kubectl(t, "", "label", "sbx", "mx-01", "-n", ns, "molt-skip=true")
	kubectl(t, "", "delete", "suo", "mix", "-n", ns)
	kubectl(t, ops("rest", ", matchExpressions: [{key: molt-skip, operator: DoesNotExist}]"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "rest", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	for name, want := range map[string]int{"mx-02": 1, "mx-01": 0} {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if env := sb.Spec.Template.Spec.Containers[0].Env; len(env) != want {
			t.Errorf("%s's template env %v after the ops that leaves mx-01 out, want %d entries", name, env, want)
		}
	}
}

// The Completed message of an ops whose stateFilter left sandboxes out sends
// the user to `kubectl molt plan -f <ops file>`: with that ops there, ended,
// the plan is made of the file as a new ops (not refused for its name) and
// names the sandbox left out, with why.
func TestPlanOfAnEndedOpsNamesWhatItLeftOut(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "lo", 3, "lo-pool", nil)
	pause(t, s, ns, names[2:])
	manifest := opsYAML("lo", "lo-pool", "3", "my-registry/sandbox-image:v2")
	kubectl(t, manifest, "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "lo", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if c := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionProgressing); c == nil || !strings.Contains(c.Message, "kubectl molt plan -f <ops file>") {
		t.Fatalf("Progressing %+v, want it to send the user to kubectl molt plan", c)
	}
	file := filepath.Join(t.TempDir(), "lo.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := molt(t, "", "plan", "-f", file, "-n", ns)
	if code != 0 || !strings.Contains(out, "has ended (Completed)") || !regexp.MustCompile(names[2]+`\s+StateFilter`).MatchString(out) {
		t.Errorf("plan exit %d, want 0 naming %s left out by the stateFilter:\n%s\n%s", code, names[2], out, errOut)
	}
}

// TestPluginStatusSaysWhenNoStatusaggRuns: while an ops runs, `kubectl molt
// status` reads statusagg's Lease, and one nobody renews says that the
// status shown is not being updated, with how to start statusagg; a Lease
// renewed says nothing.
func TestPluginStatusSaysWhenNoStatusaggRuns(t *testing.T) {
	s := Stack(t) // its services elect no leader: the Lease is this test's
	ctx := context.Background()
	ns := s.env.Namespace(t)
	leases := s.env.Kube.CoordinationV1().Leases(deployNamespace)
	t.Cleanup(func() { _ = leases.Delete(context.Background(), statusaggLease, metav1.DeleteOptions{}) })
	makeSandboxes(t, s, ns, "nsa", 1, "nsa-pool", nil)
	// Paused, it stays unfinished for as long as the test needs.
	kubectl(t, strings.Replace(opsYAML("held", "nsa-pool", "1", "my-registry/sandbox-image:v2"), "spec:\n", "spec:\n  paused: true\n", 1), "apply", "-n", ns, "-f", "-")

	holder := "statusagg-gone"
	renewed := metav1.NewMicroTime(time.Now().Add(-2 * time.Minute))
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: statusaggLease, Namespace: deployNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &renewed}}
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := molt(t, "", "status", "held", "-n", ns)
	if code != 0 || !strings.Contains(out, "warning: no statusagg runs (its Lease "+deployNamespace+"/"+statusaggLease+" was last renewed 2m") || !strings.Contains(out, "by statusagg-gone") {
		t.Errorf("status with a Lease nobody renews: exit %d\n%s\n%s", code, out, errOut)
	}
	jsonOut, _, _ := molt(t, "", "status", "held", "-n", ns, "-o", "json")
	var sum struct{ Stale string }
	if err := json.Unmarshal([]byte(jsonOut), &sum); err != nil || !strings.Contains(sum.Stale, "no statusagg runs") {
		t.Errorf("status -o json with a Lease nobody renews: stale %q (%v)\n%s", sum.Stale, err, jsonOut)
	}

	got, err := leases.Get(ctx, statusaggLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	got.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := molt(t, "", "status", "held", "-n", ns); strings.Contains(out, "warning") {
		t.Errorf("status with a Lease renewed just now warns:\n%s", out)
	}
}

// TestPluginAbortOfASupersededFailedOps: aborting a Failed ops whose
// sandboxes a later ops took on and upgraded says what it ended with and
// that a later ops took them on; a walk saw them called "never started
// (they keep their old template)", though both had run its preUpgrade and
// were on the new image.
func TestPluginAbortOfASupersededFailedOps(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "sup", 2, "sup-pool", nil)
	const image = "my-registry/sandbox-image:v2"
	kubectl(t, strings.Replace(hookOps("sup-a", "sup-pool", image, "exit 3", "", 30), "maxUnavailable: 1", "maxUnavailable: 2", 1), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "sup-a", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	kubectl(t, strings.Replace(hookOps("sup-b", "sup-pool", image, "true", "", 30), "maxUnavailable: 1", "maxUnavailable: 2", 1), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "sup-b", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)

	out, errOut, code := molt(t, "", "abort", "sup-a", "-n", ns)
	t.Logf("abort:\n%s%s", out, errOut)
	if code != 0 {
		t.Fatalf("abort exit %d:\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "which had already ended Failed: when it ended, 0 updated, 2 failed, 0 never started") || !strings.Contains(out, "a later ops took them on") || strings.Contains(out, "keep their old template") {
		t.Errorf("abort of a Failed ops whose sandboxes a later ops upgraded does not say so:\n%s", out)
	}
}
