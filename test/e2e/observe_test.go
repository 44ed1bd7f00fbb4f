package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
)

// readmeNATSLines returns the command lines (no comments) of the README
// block between <!-- nats-history --> and <!-- /nats-history -->.
func readmeNATSLines(t *testing.T) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(readmeBlock(t, "nats-history"), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "```") && !strings.HasPrefix(l, "<!--") {
			lines = append(lines, l)
		}
	}
	return lines
}

// runREADMENATSLine runs the README's login line and then line in bash, in
// a directory laid out like a checkout after `make up` (bin/, and
// .molt/nats-auth with the harness's passwords), with only the NATS address
// changed to the harness's, as the read-only user viewer.
func runREADMENATSLine(t *testing.T, s *stack, login, line string, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(s.env.RootDir, "bin"), filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".molt"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(s.env.NATSPasswords.Dir, filepath.Join(dir, ".molt", "nats-auth")); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(login, "nats://127.0.0.1:4222", s.env.NATSURL) + "\n" + line
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s\n%s: %v\n%s", login, line, err, out)
	}
	return string(out)
}

// TestREADMENATSHistory runs the README's history lines for one upgraded
// sandbox, as the read-only user viewer: the history shows that sandbox's
// events in pipeline order, and the stream and consumer lines answer.
func TestREADMENATSHistory(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "hist", 1, "hist-pool", nil)
	kubectl(t, opsYAML("hist", "hist-pool", "1", "my-registry/sandbox-image:v2"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "hist", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)

	lines := readmeNATSLines(t)
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "export NATS_URL=") {
		t.Fatalf("README's nats-history block does not start with the login line (export NATS_URL=...): %q", lines)
	}
	login, history := lines[0], ""
	for _, l := range lines[1:] {
		switch {
		case strings.Contains(l, "--terminate-at-end"):
			history = l
		case strings.Contains(l, " sub "):
			// follows live, never ends
		default:
			if out := runREADMENATSLine(t, s, login, l); !strings.Contains(out, events.StreamName) {
				t.Errorf("%s does not name stream %s:\n%s", l, events.StreamName, out)
			}
		}
	}
	if history == "" {
		t.Fatal("README has no history line (bin/nats sub ... --all --terminate-at-end)")
	}
	out := runREADMENATSLine(t, s, login, history, "NS="+ns, "SANDBOX=hist-00")
	var types []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var ce struct {
			Type    string `json:"type"`
			Subject string `json:"subject"`
		}
		if json.Unmarshal([]byte(sc.Text()), &ce) != nil || ce.Type == "" {
			continue
		}
		if ce.Subject != ns+"/hist-00" {
			t.Fatalf("history shows an event of %s", ce.Subject)
		}
		types = append(types, ce.Type)
	}
	want := []string{events.TypeRequested, events.TypePatched, events.TypePreHookDone, events.TypePodReady, events.TypePostHookDone}
	i := 0
	for _, typ := range types {
		if i < len(want) && typ == want[i] {
			i++
		}
	}
	if i != len(want) {
		t.Fatalf("history %v does not hold %v in order\n%s", types, want, out)
	}
}

// TestStatusaggMetrics: statusagg's /metrics exposes the progress metrics,
// and every metric passes promlint.
func TestStatusaggMetrics(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "met", 2, "met-pool", nil)
	kubectl(t, opsYAML("met", "met-pool", "2", "my-registry/sandbox-image:v2"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "met", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	var body string
	testenv.Eventually(t, 30*time.Second, "statusagg metrics for the ops", func() (bool, error) {
		resp, err := http.Get(s.MetricsURL("statusagg"))
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && strings.Contains(body, `molt_ops_sandboxes{`) && strings.Contains(body, `ops="met"`), err
	})
	for _, name := range []string{"molt_ops_sandboxes", "molt_stage_duration_seconds", "molt_events_handled_total"} {
		if !strings.Contains(body, name) {
			t.Errorf("statusagg /metrics lacks %s", name)
		}
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "molt_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	_ = context.Background
}
