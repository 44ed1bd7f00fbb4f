package controller

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// QueueMetrics are the metrics of a process's work queues, by queue name
// (label `name`), under the names kube-controller-manager and
// controller-runtime serve them: a dashboard or alert written for those
// works here. It is a workqueue.MetricsProvider.
type QueueMetrics struct {
	depth          *prometheus.GaugeVec
	adds           *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	workDuration   *prometheus.HistogramVec
	unfinished     *prometheus.GaugeVec
	longestRunning *prometheus.GaugeVec
	retries        *prometheus.CounterVec
}

var _ workqueue.MetricsProvider = (*QueueMetrics)(nil)

// NewQueueMetrics registers the work queues' metrics with reg.
func NewQueueMetrics(reg prometheus.Registerer) (*QueueMetrics, error) {
	buckets := prometheus.ExponentialBuckets(0.001, 4, 10) // 1 ms to about 4.4 min
	m := &QueueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_depth", Help: "Keys waiting in the work queue.",
		}, []string{"name"}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workqueue_adds_total", Help: "Keys added to the work queue (a key already waiting is counted once).",
		}, []string{"name"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "workqueue_queue_duration_seconds", Help: "How long a key waited in the work queue before a worker took it.", Buckets: buckets,
		}, []string{"name"}),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "workqueue_work_duration_seconds", Help: "How long one sync of a key took.", Buckets: buckets,
		}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_unfinished_work_seconds", Help: "Seconds of work in progress that has not been observed by workqueue_work_duration_seconds; large values mean stuck workers.",
		}, []string{"name"}),
		longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_longest_running_processor_seconds", Help: "How long the longest-running sync of the work queue has run.",
		}, []string{"name"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workqueue_retries_total", Help: "Keys requeued with backoff after a failed sync.",
		}, []string{"name"}),
	}
	for _, c := range []prometheus.Collector{m.depth, m.adds, m.latency, m.workDuration, m.unfinished, m.longestRunning, m.retries} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register work queue metrics: %w", err)
		}
	}
	return m, nil
}

func (m *QueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(name)
}

func (m *QueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name)
}

func (m *QueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name)
}

func (m *QueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.workDuration.WithLabelValues(name)
}

func (m *QueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name)
}

func (m *QueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longestRunning.WithLabelValues(name)
}

func (m *QueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name)
}
