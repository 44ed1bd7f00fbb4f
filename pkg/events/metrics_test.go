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

// TestTerminatedResultsStartAtZero: each consumer's terminal results exist at 0 from the
// start for the types it takes, so rate() sees its first terminated message; no series
// for a type its filters do not take.
func TestTerminatedResultsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.initTerminated(ConsumerPodCycler, FilterSubjects(ConsumerPodCycler))
	m.initTerminated(ConsumerStatusAgg, FilterSubjects(ConsumerStatusAgg))

	series := map[string]bool{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "molt_events_handled_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range s.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if v := s.GetCounter().GetValue(); v != 0 {
				t.Errorf("%v = %v, want 0", l, v)
			}
			series[l["consumer"]+"/"+l["type"]+"/"+l["result"]] = true
		}
	}
	want := []string{
		ConsumerPodCycler + "/" + TypePreHookDone + "/" + resultPermanent,
		ConsumerPodCycler + "/" + TypePreHookDone + "/" + resultExhausted,
		ConsumerPodCycler + "/" + typeUnknown + "/" + resultPoison,
		ConsumerStatusAgg + "/" + typeUnknown + "/" + resultPoison,
	}
	for _, typ := range Types() {
		if _, redrive := RedriveOf(typ); redrive {
			continue // handled as its input
		}
		want = append(want, ConsumerStatusAgg+"/"+typ+"/"+resultPermanent, ConsumerStatusAgg+"/"+typ+"/"+resultExhausted)
	}
	for _, w := range want {
		if !series[w] {
			t.Errorf("no series %s at 0", w)
		}
	}
	if len(series) != len(want) {
		t.Errorf("%d series, want %d (only the types each consumer takes): %v", len(series), len(want), series)
	}
}

func TestSubjectMatches(t *testing.T) {
	for _, tc := range []struct {
		subject, filter string
		want            bool
	}{
		{"molt.ns.sb.patched", "molt.*.*.patched", true},
		{"molt.ns.sb.requested", "molt.*.*.patched", false},
		{"molt.ns.sb.patched", "molt.>", true},
		{"molt", "molt.>", false},
		{"molt.ns.sb", "molt.*.*.patched", false},
		{"molt.ns.sb.patched.x", "molt.*.*.patched", false},
	} {
		if got := matchesAny(tc.subject, []string{tc.filter}); got != tc.want {
			t.Errorf("matchesAny(%q, %q) = %v, want %v", tc.subject, tc.filter, got, tc.want)
		}
	}
}
