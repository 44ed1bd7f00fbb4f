package statusagg

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
)

func TestMetricsPassPromlint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ops"}}
	m.setOps(ops, agentsv1alpha1.SandboxUpdateOpsStatus{Phase: agentsv1alpha1.SandboxUpdateOpsUpdating, Replicas: 3, UpdatedReplicas: 1})
	clock := newStageClock()
	t0 := time.Unix(1000, 0)
	m.observeTransition(clock, "ns/sb", transition{Attempt: "a", New: true, To: "PreUpgrade"}, t0)
	m.observeTransition(clock, "ns/sb", transition{Attempt: "a", From: "PreUpgrade", To: "UpgradePodFailed"}, t0.Add(3*time.Second))

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	if got := testutil.ToFloat64(m.failures.WithLabelValues("UpgradePodFailed")); got != 1 {
		t.Errorf("failures = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.stageDuration); n != 1 {
		t.Errorf("stage duration series = %d, want 1", n)
	}
}

func TestStageClockObservesEachStageOnce(t *testing.T) {
	c := newStageClock()
	t0 := time.Unix(1000, 0)
	if _, _, ok := c.advance("k", transition{Attempt: "a", New: true, To: "PreUpgrade"}, t0); ok {
		t.Fatal("a new attempt ended a stage")
	}
	stage, took, ok := c.advance("k", transition{Attempt: "a", From: "PreUpgrade", To: "UpgradePod"}, t0.Add(2*time.Second))
	if !ok || stage != "PreUpgrade" || took != 2*time.Second {
		t.Fatalf("advance = %s %s %v, want PreUpgrade 2s", stage, took, ok)
	}
	if _, _, ok := c.advance("k", transition{Attempt: "a", From: "PreUpgrade", To: "UpgradePod"}, t0.Add(3*time.Second)); ok {
		t.Fatal("a stage was observed twice")
	}
}
