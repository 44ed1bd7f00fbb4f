package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"molt.dev/dev/devcluster"
	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// dashboard is what the test reads of deploy/grafana/molt.json: its panels
// and their queries.
type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// startPrometheus runs Debian's prometheus binary scraping every service of
// s each second, with deploy/prometheus/rules.yaml, and returns its address.
func startPrometheus(t *testing.T, s *stack) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus not found: install Debian's prometheus package (apt-get install prometheus); .ci/run does")
	}
	dir := t.TempDir()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [%q]\nscrape_configs:\n",
		filepath.Join(s.env.RootDir, "deploy", "prometheus", "rules.yaml"))
	s.mu.Lock()
	for _, svc := range serviceNames {
		fmt.Fprintf(&cfg, "- job_name: molt-%s\n  static_configs: [{targets: [%q]}]\n", svc, s.addrs[svc])
	}
	s.mu.Unlock()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := devcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	launcher := devcluster.Config{BinDir: filepath.Dir(bin), StateDir: dir}
	p, err := launcher.Launch("prometheus", bin, []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
	}, nil)
	if err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	testenv.Eventually(t, time.Minute, "prometheus ready", func() (bool, error) {
		code, body := testenv.HTTPGet(addr, "/-/ready")
		return code == http.StatusOK, fmt.Errorf("%d %s (log %s)", code, body, p.LogPath)
	})
	return addr
}

// promQuery runs expr on the Prometheus at addr and returns how many series
// it returned.
func promQuery(addr, expr string) (int, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("query refused: %s", r.Error)
	}
	return len(r.Data.Result), nil
}

// TestDashboardQueriesReturnData (issue 11): every query of the Grafana
// dashboard deploy/grafana/molt.json is valid PromQL and returns data from a
// real Prometheus that scrapes the five services (with deploy/prometheus's
// recording rules loaded) after a demo: one ops that completes and one that
// fails.
func TestDashboardQueriesReturnData(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	data, err := os.ReadFile(filepath.Join(s.env.RootDir, "deploy", "grafana", "molt.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("decode deploy/grafana/molt.json: %v", err)
	}
	if d.UID == "" || len(d.Panels) < 8 {
		t.Fatalf("dashboard uid %q with %d panels: want a uid and the panels of issue 11", d.UID, len(d.Panels))
	}
	prom := startPrometheus(t, s)

	makeSandboxes(t, s, ns, "dash", 3, "dash-pool", nil)
	makeSandboxes(t, s, ns, "dbad", 1, "dbad-pool", nil)
	kubectl(t, opsYAML("dash", "dash-pool", "3", "my-registry/sandbox-image:v2"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "dash", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	kubectl(t, opsYAML("dbad", "dbad-pool", "1", "my-registry/non-existent:v2"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "dbad", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)

	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %d %q has no query", p.ID, p.Title)
		}
		for _, q := range p.Targets {
			testenv.Eventually(t, 90*time.Second, fmt.Sprintf("panel %q query %s returns data", p.Title, q.RefID), func() (bool, error) {
				n, err := promQuery(prom, q.Expr)
				return err == nil && n > 0, fmt.Errorf("%s: %d series, %v", q.Expr, n, err)
			})
		}
	}
}
