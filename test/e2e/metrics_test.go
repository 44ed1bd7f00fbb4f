package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// readmeMetric is one row of the README's metric table.
type readmeMetric struct {
	name, kind string
	labels     []string
	servedBy   []string
	// eventual: the row says the metric appears only after something
	// ("after the first failure").
	eventual bool
}

// readmeMetrics parses the README table between <!-- metrics --> and
// <!-- /metrics -->, by metric name.
func readmeMetrics(t *testing.T) map[string]readmeMetric {
	t.Helper()
	rows := map[string]readmeMetric{}
	for _, cells := range tableRows(readmeBlock(t, "metrics"), 5) {
		m := readmeMetric{
			name:     strings.Trim(cells[0], "`"),
			kind:     cells[1],
			labels:   listCell(cells[2]),
			servedBy: listCell(cells[3]),
			eventual: strings.Contains(cells[4], "(after the first "),
		}
		rows[m.name] = m
	}
	if len(rows) == 0 {
		t.Fatal("README's metric table has no rows")
	}
	return rows
}

// servedMetric is a molt_ metric family as a service serves it.
type servedMetric struct {
	kind   string
	labels []string
}

// scrapeMolt returns the metric families inst serves that the README's
// table lists (molt_ and the work queues' workqueue_), by name.
func scrapeMolt(t *testing.T, s *stack, inst string) map[string]servedMetric {
	t.Helper()
	resp, err := http.Get(s.MetricsURL(inst))
	if err != nil {
		t.Fatalf("get %s metrics: %v", inst, err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s metrics: %v", inst, err)
	}
	out := map[string]servedMetric{}
	for name, f := range families {
		if !strings.HasPrefix(name, "molt_") && !strings.HasPrefix(name, "workqueue_") {
			continue
		}
		var labels []string
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !slices.Contains(labels, lp.GetName()) {
					labels = append(labels, lp.GetName())
				}
			}
		}
		sort.Strings(labels)
		out[name] = servedMetric{kind: strings.ToLower(f.GetType().String()), labels: labels}
	}
	return out
}

// TestREADMEMetrics: after an upgrade, every molt_ and workqueue_ metric a
// service serves
// is in the README's table, with its type, its labels and that service; and
// every row of the table is served by one of the services it names (but for
// the rows that appear only after a failure or a re-drive).
func TestREADMEMetrics(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "rmet", 2, "rmet-pool", nil)
	kubectl(t, opsYAML("rmet", "rmet-pool", "2", "my-registry/sandbox-image:v2"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "rmet", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	rows := readmeMetrics(t)

	seen := map[string]bool{}
	testenv.Eventually(t, 30*time.Second, "the ops's progress metrics on statusagg", func() (bool, error) {
		_, ok := scrapeMolt(t, s, "statusagg")["molt_ops_phase"]
		return ok, fmt.Errorf("statusagg serves no molt_ops_phase yet")
	})
	for _, svc := range serviceNames {
		for name, m := range scrapeMolt(t, s, svc) {
			row, ok := rows[name]
			switch {
			case !ok:
				t.Errorf("%s serves %s (%s, labels %v), which the README's metric table does not list", svc, name, m.kind, m.labels)
				continue
			case row.kind != m.kind:
				t.Errorf("%s: README says %s, %s serves a %s", name, row.kind, svc, m.kind)
			case !slices.Equal(row.labels, m.labels):
				t.Errorf("%s: README lists labels %v, %s serves %v", name, row.labels, svc, m.labels)
			case !slices.Contains(row.servedBy, svc):
				t.Errorf("%s: served by %s, which the README's row (%v) does not name", name, svc, row.servedBy)
			}
			seen[name] = true
		}
	}
	for name, row := range rows {
		if !seen[name] && !row.eventual {
			t.Errorf("README lists %s (served by %v), which no service serves after an upgrade", name, row.servedBy)
		}
	}
}
