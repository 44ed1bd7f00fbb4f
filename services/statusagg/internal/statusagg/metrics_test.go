package statusagg

import (
	"slices"
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
	// Every failure reason is exported at 0 before its first failure, so
	// that increase() counts that first one.
	if n := testutil.CollectAndCount(m.failures); n != len(agentsv1alpha1.UpgradingFailedReasons) {
		t.Errorf("failure series before any failure = %d, want one per reason (%d)", n, len(agentsv1alpha1.UpgradingFailedReasons))
	}
	for _, reason := range agentsv1alpha1.UpgradingFailedReasons {
		if got := testutil.ToFloat64(m.failures.WithLabelValues(reason)); got != 0 {
			t.Errorf("failures{reason=%s} before any failure = %v, want 0", reason, got)
		}
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
	if got := c.advance("k", transition{Attempt: "a", New: true, To: "PreUpgrade"}, t0); got != nil {
		t.Fatalf("a new attempt ended stages %v", got)
	}
	got := c.advance("k", transition{Attempt: "a", From: "PreUpgrade", To: "UpgradePod"}, t0.Add(2*time.Second))
	if want := []stageTime{{"PreUpgrade", 2 * time.Second}}; !slices.Equal(got, want) {
		t.Fatalf("advance = %v, want %v", got, want)
	}
	if got := c.advance("k", transition{Attempt: "a", From: "PreUpgrade", To: "UpgradePod"}, t0.Add(3*time.Second)); got != nil {
		t.Fatalf("a stage was observed twice: %v", got)
	}
}

// posthook-done decided before pod-ready: the jump from UpgradePod to
// Succeeded is split at pod-ready's time, whichever the clock learns first.
func TestStageClockSplitsAJumpAtALateEvent(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	start := func() *stageClock {
		c := newStageClock()
		c.advance("k", transition{Attempt: "a", New: true, To: "PreUpgrade"}, t0)
		c.advance("k", transition{Attempt: "a", From: "PreUpgrade", To: "UpgradePod"}, at(1))
		return c
	}
	jump := transition{Attempt: "a", From: "UpgradePod", To: "Succeeded"}
	want := []stageTime{{"UpgradePod", 4 * time.Second}, {"PostUpgrade", time.Second}}

	// Written first, pod-ready skipped after.
	c := start()
	if got := c.advance("k", jump, at(6)); got != nil {
		t.Fatalf("the jump observed %v before pod-ready came", got)
	}
	if got := c.late("k", "a", "PostUpgrade", at(5)); !slices.Equal(got, want) {
		t.Errorf("late after the jump = %v, want %v", got, want)
	}
	if got := c.late("k", "a", "PostUpgrade", at(5)); got != nil {
		t.Errorf("a redelivered pod-ready observed %v again", got)
	}
	if len(c.starts) != 0 {
		t.Errorf("the ended attempt is still remembered: %v", c.starts)
	}

	// pod-ready skipped against the pending Succeeded, written after.
	c = start()
	if got := c.late("k", "a", "PostUpgrade", at(5)); got != nil {
		t.Fatalf("late before the jump observed %v", got)
	}
	if got := c.advance("k", jump, at(6)); !slices.Equal(got, want) {
		t.Errorf("the jump after late = %v, want %v", got, want)
	}

	// A late time outside the jump (clocks of two hosts) falls back to the
	// whole span, never to nothing.
	c = start()
	c.advance("k", jump, at(6))
	if got, want := c.late("k", "a", "PostUpgrade", at(7)), []stageTime{{"UpgradePod", 5 * time.Second}}; !slices.Equal(got, want) {
		t.Errorf("late out of order = %v, want %v", got, want)
	}

	// A stale event of a stage the attempt has passed in order changes nothing.
	c = start()
	if got := c.late("k", "a", "PreUpgrade", at(2)); got != nil {
		t.Errorf("a redelivered patched observed %v", got)
	}
	if got, want := c.advance("k", transition{Attempt: "a", From: "UpgradePod", To: "PostUpgrade"}, at(3)), []stageTime{{"UpgradePod", 2 * time.Second}}; !slices.Equal(got, want) {
		t.Errorf("in order = %v, want %v", got, want)
	}

	// A new attempt replaces a jump still waiting for its late event.
	c = start()
	c.advance("k", jump, at(6))
	c.advance("k", transition{Attempt: "b", New: true, To: "PreUpgrade"}, at(10))
	if got := c.late("k", "a", "PostUpgrade", at(5)); got != nil {
		t.Errorf("the old attempt's late event observed %v", got)
	}
}
