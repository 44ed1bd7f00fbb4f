package podcycler

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsArePromlintClean(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.created.WithLabelValues(reasonUpgrade).Inc()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	if got := testutil.ToFloat64(m.created.WithLabelValues(reasonUpgrade)); got != 1 {
		t.Errorf("molt_podcycler_pods_created_total{reason=upgrade} = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.deleted, "molt_podcycler_pods_deleted_total"); n != 2 {
		t.Errorf("pods_deleted_total series = %d, want 2 (upgrade, pause) from the start", n)
	}
}
