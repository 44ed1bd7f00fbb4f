package deploy

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite deploy/components/prometheusrules/prometheusrule.yaml from deploy/prometheus/rules.yaml")

var prometheusRulePath = filepath.Join("..", "..", "deploy", "components", "prometheusrules", "prometheusrule.yaml")

// prometheusRuleHead is what prometheusrule.yaml holds before the groups of
// rules.yaml, which follow indented under spec.
const prometheusRuleHead = `# Generated from deploy/prometheus/rules.yaml, the file to edit, by
#   cd test/deploy && GOWORK=off go test -run TestPrometheusRuleIsRulesYAML -update .
# which fails while the groups here differ from those of rules.yaml.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: molt
  namespace: molt-system
  labels: {app.kubernetes.io/part-of: molt}
spec:
`

// TestPrometheusRuleIsRulesYAML checks that the PrometheusRule of
// components/prometheusrules decodes strictly with the Prometheus Operator's
// own types and holds exactly the groups of deploy/prometheus/rules.yaml,
// which promtool tests (make test-rules); with -update it writes the file
// from rules.yaml first.
func TestPrometheusRuleIsRulesYAML(t *testing.T) {
	rules, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(prometheusRulePath, prometheusRuleFrom(t, rules), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var file struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(rules, &file); err != nil {
		t.Fatalf("%s: %v (a field the Prometheus Operator does not know)", rulesPath, err)
	}
	raw, err := os.ReadFile(prometheusRulePath)
	if err != nil {
		t.Fatalf("%v (run: cd test/deploy && GOWORK=off go test -run TestPrometheusRuleIsRulesYAML -update .)", err)
	}
	var pr monitoringv1.PrometheusRule
	if err := yaml.UnmarshalStrict(raw, &pr); err != nil {
		t.Fatalf("%s: %v", prometheusRulePath, err)
	}
	if !reflect.DeepEqual(pr.Spec.Groups, file.Groups) {
		t.Fatalf("%s: its groups differ from those of %s (edit rules.yaml, then run: cd test/deploy && GOWORK=off go test -run TestPrometheusRuleIsRulesYAML -update .)", prometheusRulePath, rulesPath)
	}
}

// prometheusRuleFrom is prometheusRuleHead followed by rules.yaml from its
// groups: line on, indented under spec (its header comment left out).
func prometheusRuleFrom(t *testing.T, rules []byte) []byte {
	t.Helper()
	i := bytes.Index(rules, []byte("\ngroups:"))
	if i < 0 {
		t.Fatalf("%s: no top-level groups:", rulesPath)
	}
	out := []byte(prometheusRuleHead)
	for _, line := range bytes.SplitAfter(rules[i+1:], []byte("\n")) {
		if len(bytes.TrimSpace(line)) > 0 {
			out = append(out, "  "...)
		}
		out = append(out, line...)
	}
	return out
}
