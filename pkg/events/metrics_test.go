package events

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsPromlint runs promlint over every metric of the package, with samples so each
// family is exported.
func TestMetricsPromlint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.recordPublish(TypePatched, publishStored)
	m.recordHandled(ConsumerHookRunner, TypePatched, resultAck, 2*time.Second)
	m.recordDrift(objectStream, StreamName, []drift{{field: "num_replicas", running: "3", wanted: "1"}})

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 4 {
		t.Fatalf("gathered %d metric families, want 4", len(mfs))
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Fatal("registering twice on one registry: want error")
	}
	var nilMetrics *Metrics // records nothing, must not panic
	nilMetrics.recordPublish(TypePatched, publishStored)
	nilMetrics.recordHandled(ConsumerPatcher, TypePatched, resultAck, time.Second)
	nilMetrics.recordDrift(objectConsumer, ConsumerPatcher, []drift{{field: "ack_wait"}})
}

func TestMetricsCount(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m.recordHandled(ConsumerPatcher, TypeRequested, resultRetry, time.Millisecond)
	m.recordHandled(ConsumerPatcher, TypeRequested, resultRetry, time.Millisecond)
	if got := testutil.ToFloat64(m.handled.WithLabelValues(ConsumerPatcher, TypeRequested, resultRetry)); got != 2 {
		t.Fatalf("handled retry = %v, want 2", got)
	}
}
