package deploy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
)

// dashboardPath is the dashboard, relative to this module.
var dashboardPath = filepath.Join("..", "..", "deploy", "grafana", "molt.json")

// strictErr is the strict decoder's error, nil when it found nothing: the
// SDK returns its list of errors even when the list is empty.
func strictErr(err error) error {
	var list cog.BuildErrors
	if errors.As(err, &list) && len(list) == 0 {
		return nil
	}
	return err
}

// panelQuery is one query of a dashboard panel.
type panelQuery struct {
	panel  string
	target int
	expr   string
}

// readDashboard decodes deploy/grafana/molt.json leniently (what a strict
// decode checks is TestDashboardDecodesStrictly's), with the SDK's panel and
// query types registered.
func readDashboard(t *testing.T) dashboard.Dashboard {
	t.Helper()
	plugins.RegisterDefaultPlugins()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard.Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("decode of %s: %v", dashboardPath, err)
	}
	return d
}

// panelQueries lists every query of d's panels, failing t for a panel
// without one, a row, or a query that is not a non-empty Prometheus query.
func panelQueries(t *testing.T, d dashboard.Dashboard) []panelQuery {
	t.Helper()
	var qs []panelQuery
	for i, p := range d.Panels {
		if p.Panel == nil {
			t.Errorf("panels[%d] is a row: the dashboard has none", i)
			continue
		}
		title := "<untitled>"
		if p.Panel.Title != nil {
			title = *p.Panel.Title
		}
		if len(p.Panel.Targets) == 0 {
			t.Errorf("panel %q has no query", title)
		}
		for j, target := range p.Panel.Targets {
			q, ok := target.(*prometheus.Dataquery)
			switch {
			case !ok:
				t.Errorf("panel %q target %d is a %T, want a Prometheus query", title, j, target)
			case strings.TrimSpace(q.Expr) == "":
				t.Errorf("panel %q target %d has an empty expr", title, j)
			default:
				qs = append(qs, panelQuery{panel: title, target: j, expr: q.Expr})
			}
		}
	}
	return qs
}

// TestDashboardDecodesStrictly (issue 11): deploy/grafana/molt.json is a
// dashboard as Grafana's schema has it: the SDK's strict decoder finds no
// unknown or missing field and counts every panel (it can drop panels, so
// the count is compared with a lenient decode's), and every panel's query,
// read by the lenient decode (the strict one leaves a panel's content
// empty), is a Prometheus query that Prometheus's parser accepts.
func TestDashboardDecodesStrictly(t *testing.T) {
	lenient := readDashboard(t)
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var strict dashboard.Dashboard
	if err := strictErr(strict.UnmarshalJSONStrict(raw)); err != nil {
		t.Fatalf("strict decode of %s: %v", dashboardPath, err)
	}
	if len(strict.Panels) != len(lenient.Panels) || len(strict.Panels) < 9 {
		t.Fatalf("strict decode kept %d panels, the lenient one %d: want the same, and at least the 9 of issue 11", len(strict.Panels), len(lenient.Panels))
	}
	if strict.Uid == nil || *strict.Uid == "" {
		t.Error("the dashboard has no uid: Grafana's provisioning would give it a new one on every start")
	}

	promql := parser.NewParser(parser.Options{})
	for _, q := range panelQueries(t, lenient) {
		if _, err := promql.ParseExpr(q.expr); err != nil {
			t.Errorf("panel %q target %d: %s: %v", q.panel, q.target, q.expr, err)
		}
	}
}
