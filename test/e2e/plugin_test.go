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
	"testing"
	"time"

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
// own (socket -L), in a 160x60 terminal; the pane stays after the command
// exits so its last screen can be read.
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
	p.run("set-option", "-t", "molt", "remain-on-exit", "on")
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
	pre := `sleep 1; if [ "$(hostname)" = st-13 ]; then echo "backup of $(hostname) failed: disk full" >&2; exit 3; fi`
	// 10 at a time keeps the test short.
	y := strings.Replace(hookOps("st", "st-pool", "my-registry/sandbox-image:v2", pre, "", 30), "maxUnavailable: 1\n", "maxUnavailable: 10\n", 1)
	kubectl(t, y, "apply", "-n", ns, "-f", "-")

	env := s.env
	bin := filepath.Join(env.RootDir, "bin", "kubectl-molt")
	pane := newTmuxPane(t, fmt.Sprintf("%s --kubeconfig=%s status st -n %s -w --slowest 3; echo EXIT=$?", bin, env.Kubeconfig, ns))

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
	for _, want := range []string{"Failed", "49/50 updated, 1 failed", "FAILED", "st-13", "PreUpgradeFailed", "stderr: backup of st-13 failed: disk full", "█"} {
		if !strings.Contains(final, want) {
			t.Errorf("the last screen lacks %q:\n%s", want, final)
		}
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
	out, _, code := molt(t, "", "status", "st", "-n", ns, "-o", "json")
	if code != 1 {
		t.Errorf("status -o json exit code %d, want 1", code)
	}
	var sum struct {
		Phase                            string
		Total, Updated, Updating, Failed int
		NotStarted                       int                                              `json:"notStarted"`
		FailedSandboxes                  []struct{ Name, Reason, Message, Stderr string } `json:"failedSandboxes"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
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
}
