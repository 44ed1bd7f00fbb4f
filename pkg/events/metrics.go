package events

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what Publisher and Consume do, and the config drift EnsureStream and
// EnsureConsumer find. A nil *Metrics records nothing, so tests and tools may leave it out.
type Metrics struct {
	published      *prometheus.CounterVec
	handled        *prometheus.CounterVec
	handleDuration *prometheus.HistogramVec
	configDrift    *prometheus.GaugeVec
	pending        *prometheus.GaugeVec
	ackPending     *prometheus.GaugeVec
}

// Publish result label values of molt_events_published_total.
const (
	publishStored    = "stored"    // new message in the stream
	publishDuplicate = "duplicate" // dropped by the duplicate window (same Nats-Msg-Id)
	publishError     = "error"     // not acknowledged by the server
)

// typeUnknown is the type label of a message that could not be decoded.
const typeUnknown = "unknown"

// NewMetrics creates the package's collectors and registers them on reg (not the global
// registry, so tests and several services in one process do not collide).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "molt",
			Subsystem: "events",
			Name:      "published_total",
			Help:      "Events published to JetStream, by CloudEvent type and result (stored, duplicate, error).",
		}, []string{"type", "result"}),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "molt",
			Subsystem: "events",
			Name:      "handled_total",
			Help:      "Events handled by a consumer, by consumer, CloudEvent type and result (ack, retry, permanent, poison, exhausted).",
		}, []string{"consumer", "type", "result"}),
		handleDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "molt",
			Subsystem: "events",
			Name:      "handle_duration_seconds",
			Help:      "Time a handler took for one event, by consumer and CloudEvent type.",
			// Handlers range from a status write (ms) to a hook or pod wait (minutes).
			Buckets: []float64{.005, .025, .1, .5, 1, 5, 15, 60, 180, 600},
		}, []string{"consumer", "type"}),
		configDrift: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "molt",
			Subsystem: "events",
			Name:      "config_drift",
			Help: "1 for each field whose running value differs from molt's config and was kept, not overwritten, " +
				"by object (stream, consumer), name and field; set by EnsureStream and EnsureConsumer.",
		}, []string{"object", "name", "field"}),
	}
	m.pending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "molt", Subsystem: "events", Name: "consumer_pending",
		Help: "Messages of the stream the consumer has not delivered yet (its backlog), read from the server every 15s by the consuming service.",
	}, []string{"consumer"})
	m.ackPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "molt", Subsystem: "events", Name: "consumer_ack_pending",
		Help: "Messages delivered to the consumer and not acknowledged yet (being handled, or held by a replica that died), read every 15s.",
	}, []string{"consumer"})
	for _, c := range []prometheus.Collector{m.published, m.handled, m.handleDuration, m.configDrift, m.pending, m.ackPending} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register events metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) recordPublish(eventType, result string) {
	if m == nil {
		return
	}
	m.published.WithLabelValues(eventType, result).Inc()
}

func (m *Metrics) recordHandled(consumer, eventType, result string, took time.Duration) {
	if m == nil {
		return
	}
	m.handled.WithLabelValues(consumer, eventType, result).Inc()
	m.handleDuration.WithLabelValues(consumer, eventType).Observe(took.Seconds())
}

// initTerminated starts at 0 the terminal results (permanent and exhausted for each event
// type the consumer's filters take, but re-drives, which Decode turns into their inputs, poison for an undecodable message) of one consumer's
// molt_events_handled_total: a counter whose series appears at 1 shows no increase(), so
// the first terminated message after a start would be missed by rate() and alerts.
func (m *Metrics) initTerminated(consumer string, filters []string) {
	if m == nil {
		return
	}
	for _, t := range Types() {
		tok, _ := TokenFor(t)
		if _, redrive := redriveOf[t]; redrive || !matchesAny(SandboxSubject("ns", "sandbox", tok), filters) {
			continue // a re-drive is handled, and counted, as the input it stands for
		}
		m.handled.WithLabelValues(consumer, t, resultPermanent)
		m.handled.WithLabelValues(consumer, t, resultExhausted)
	}
	m.handled.WithLabelValues(consumer, typeUnknown, resultPoison)
}

// matchesAny reports whether a literal subject matches one of the NATS filter subjects
// ("*" one token, ">" the rest); no filter takes every subject.
func matchesAny(subject string, filters []string) bool {
	if len(filters) == 0 {
		return true
	}
	for _, f := range filters {
		if subjectMatches(strings.Split(subject, "."), strings.Split(f, ".")) {
			return true
		}
	}
	return false
}

func subjectMatches(subject, filter []string) bool {
	for i, ft := range filter {
		switch {
		case ft == ">":
			return i < len(subject)
		case i >= len(subject):
			return false
		case ft != "*" && ft != subject[i]:
			return false
		}
	}
	return len(subject) == len(filter)
}

// recordBacklog sets a consumer's backlog gauges.
func (m *Metrics) recordBacklog(consumer string, pending uint64, ackPending int) {
	if m == nil {
		return
	}
	m.pending.WithLabelValues(consumer).Set(float64(pending))
	m.ackPending.WithLabelValues(consumer).Set(float64(ackPending))
}

// recordDrift sets the drift gauge of one stream or consumer to exactly ds: 1 for each field
// in ds, no series for the others.
func (m *Metrics) recordDrift(object, name string, ds []drift) {
	if m == nil {
		return
	}
	m.configDrift.DeletePartialMatch(prometheus.Labels{"object": object, "name": name})
	for _, d := range ds {
		m.configDrift.WithLabelValues(object, name, d.field).Set(1)
	}
}
