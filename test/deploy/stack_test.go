package deploy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Set by hack/compose-test.sh (make compose-test) once the stack of
// docker-compose.yaml is up and seed 000's basic example has completed.
const (
	envPrometheus = "MOLT_COMPOSE_PROMETHEUS" // host:port of the stack's Prometheus
	envOps        = "MOLT_COMPOSE_OPS"        // namespace/name of the completed ops
	envSandboxes  = "MOLT_COMPOSE_SANDBOXES"  // how many sandboxes it upgraded
)

// promResult is one series of an instant query's answer.
type promResult struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// promQuery runs expr on the Prometheus at addr.
func promQuery(addr, expr string) ([]promResult, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promResult `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("decode the answer (%s): %w", resp.Status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query refused: %s", r.Error)
	}
	return r.Data.Result, nil
}

// eventually polls check every second until it returns nil or timeout.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: not after %s: %v", what, timeout, err)
			return
		}
		time.Sleep(time.Second)
	}
}

// TestComposeStackPrometheus (issue 11) runs against the stack that
// `make compose-test` brought up with docker-compose.yaml, after it upgraded
// seed 000's basic example and one ops failed: the stack's Prometheus has
// molt's metrics of the completed ops (every sandbox updated, progress 1),
// and every query of the Grafana dashboard returns data from it.
func TestComposeStackPrometheus(t *testing.T) {
	addr := os.Getenv(envPrometheus)
	if addr == "" {
		t.Fatal("needs the stack of docker-compose.yaml: run `make compose-test`, which brings it up and sets " + envPrometheus + " (`make test-deploy` leaves this test to it)")
	}
	ns, name, err := splitOps(os.Getenv(envOps))
	if err != nil {
		t.Fatal(err)
	}
	want, err := strconv.Atoi(os.Getenv(envSandboxes))
	if err != nil {
		t.Fatalf("%s=%q: not a number", envSandboxes, os.Getenv(envSandboxes))
	}
	ops := fmt.Sprintf(`namespace=%q, ops=%q`, ns, name)
	for _, c := range []struct{ expr, value string }{
		{fmt.Sprintf(`molt_ops_sandboxes{%s, state="updated"}`, ops), strconv.Itoa(want)},
		{fmt.Sprintf(`molt:ops_progress:ratio{%s}`, ops), "1"},
	} {
		eventually(t, 90*time.Second, c.expr+" = "+c.value, func() error {
			res, err := promQuery(addr, c.expr)
			switch {
			case err != nil:
				return err
			case len(res) != 1:
				return fmt.Errorf("%d series: %v", len(res), res)
			case res[0].Value[1] != c.value:
				return fmt.Errorf("value %v", res[0].Value[1])
			}
			return nil
		})
	}

	for _, q := range panelQueries(t, readDashboard(t)) {
		eventually(t, 90*time.Second, fmt.Sprintf("panel %q query %d returns data", q.panel, q.target), func() error {
			res, err := promQuery(addr, q.expr)
			if err == nil && len(res) == 0 {
				err = fmt.Errorf("%s: no series", q.expr)
			}
			return err
		})
	}
}

func splitOps(v string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" {
		return "", "", fmt.Errorf("%s=%q: want NAMESPACE/NAME", envOps, v)
	}
	return ns, name, nil
}
