package podcycler

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons a pod is created or deleted: the reason label of podcycler's pod counters.
const (
	reasonUpgrade   = "upgrade"   // prehook-done: the old pod replaced by one of the target revision
	reasonLifecycle = "lifecycle" // a sandbox without a pod got one (new, or resumed)
	reasonPause     = "pause"     // spec.paused: the pod stopped
)

// metrics counts podcycler's writes to Pods.
type metrics struct {
	created *prometheus.CounterVec
	deleted *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "molt",
			Subsystem: "podcycler",
			Name:      "pods_created_total",
			Help:      "Sandbox pods created, by reason (upgrade, lifecycle).",
		}, []string{"reason"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "molt",
			Subsystem: "podcycler",
			Name:      "pods_deleted_total",
			Help:      "Sandbox pods deleted, by reason (upgrade, pause).",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.created, m.deleted} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register podcycler metrics: %w", err)
		}
	}
	// Start every series at 0 so rates work from the first scrape.
	for _, r := range []string{reasonUpgrade, reasonLifecycle} {
		m.created.WithLabelValues(r)
	}
	for _, r := range []string{reasonUpgrade, reasonPause} {
		m.deleted.WithLabelValues(r)
	}
	return m, nil
}
