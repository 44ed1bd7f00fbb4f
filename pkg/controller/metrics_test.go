package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A controller's queue reports its adds, its syncs and its retries under its
// name, and the metrics pass promlint.
func TestQueueMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewQueueMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	synced := make(chan string, 10)
	fail := true
	c := New("demo", func(_ context.Context, key string) error {
		synced <- key
		if fail {
			fail = false
			return errors.New("first sync fails")
		}
		return nil
	}, WithMetrics(m))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 1) }()
	c.EnqueueKey("ns/a")
	for range 2 { // the failed sync, then its retry
		select {
		case <-synced:
		case <-time.After(10 * time.Second):
			t.Fatal("the key was not synced twice within 10s")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		metric string
		got    float64
		want   float64
	}{
		{"adds", testutil.ToFloat64(m.adds.WithLabelValues("demo")), 2}, // the key and its retry
		{"retries", testutil.ToFloat64(m.retries.WithLabelValues("demo")), 1},
		{"depth", testutil.ToFloat64(m.depth.WithLabelValues("demo")), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s of queue demo = %v, want %v", c.metric, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.workDuration, "workqueue_work_duration_seconds"); n != 1 {
		t.Errorf("work duration series = %d, want 1", n)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP workqueue_retries_total Keys requeued with backoff after a failed sync.
# TYPE workqueue_retries_total counter
workqueue_retries_total{name="demo"} 1
`), "workqueue_retries_total"); err != nil {
		t.Error(err)
	}
}
