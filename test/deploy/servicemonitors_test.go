package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

var (
	serviceMonitorsPath = filepath.Join("..", "..", "deploy", "components", "servicemonitors", "servicemonitors.yaml")
	rulesPath           = filepath.Join("..", "..", "deploy", "prometheus", "rules.yaml")
)

// services are molt's five services, each scraped by one ServiceMonitor.
var services = []string{"selector", "patcher", "hookrunner", "podcycler", "statusagg"}

// TestServiceMonitorsGiveTheJobsTheAlertsSelect decodes the optional
// ServiceMonitors strictly with the Prometheus Operator's own types and
// checks what the operator would make of them: without a relabeling the
// operator names the job after the Service (selector-metrics), which no
// alert or panel selects, and without honorLabels it overwrites the ops
// metrics' namespace label with molt-system. The service-down alert must
// also see a job with no target at all (absent).
func TestServiceMonitorsGiveTheJobsTheAlertsSelect(t *testing.T) {
	raw, err := os.ReadFile(serviceMonitorsPath)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`up\{job=~"([^"]+)"\}`).FindSubmatch(rules)
	if m == nil {
		t.Fatalf("%s: no up{job=~\"...\"} selector in the service-down alert", rulesPath)
	}
	alertJobs := regexp.MustCompile("^(?:" + string(m[1]) + ")$")

	jobs := map[string]string{} // ServiceMonitor name → job
	for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var sm monitoringv1.ServiceMonitor
		if err := yaml.UnmarshalStrict(doc, &sm); err != nil {
			t.Fatalf("%s, document %d: %v", serviceMonitorsPath, i+1, err)
		}
		if len(sm.Spec.Endpoints) != 1 {
			t.Fatalf("ServiceMonitor %s: %d endpoints, want 1", sm.Name, len(sm.Spec.Endpoints))
		}
		ep := sm.Spec.Endpoints[0]
		if !ep.HonorLabels {
			t.Errorf("ServiceMonitor %s: honorLabels is not true: the operator's namespace label (molt-system) would replace the ops's namespace on molt_ops_* series", sm.Name)
		}
		job := ""
		for _, r := range ep.RelabelConfigs {
			if r.TargetLabel == "job" && len(r.SourceLabels) == 0 && (r.Action == "" || r.Action == "replace") && r.Replacement != nil {
				job = *r.Replacement
			}
		}
		if job == "" {
			t.Errorf("ServiceMonitor %s: no relabeling sets job: the operator would name the job after the Service", sm.Name)
			continue
		}
		if !alertJobs.MatchString(job) {
			t.Errorf("ServiceMonitor %s: job %q is not one the service-down alert selects (%s)", sm.Name, job, m[1])
		}
		jobs[sm.Name] = job
	}
	for _, s := range services {
		if want := "molt-" + s; jobs[s] != want {
			t.Errorf("ServiceMonitor %s: job %q, want %q", s, jobs[s], want)
		}
		if absent := `absent(up{job="molt-` + s + `"})`; !bytes.Contains(rules, []byte(absent)) {
			t.Errorf("%s: no %s in the service-down alert: it would not fire while %s has no pod to scrape", rulesPath, absent, s)
		}
	}
}
