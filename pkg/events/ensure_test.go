package events

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2/ktesting"
)

func TestSubjectsOverlap(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{"same", "molt.>", "molt.>", true},
		{"everything", ">", "molt.>", true},
		{"narrower", "molt.team-a.>", "molt.>", true},
		{"star", "*.team-a.*.failed", "molt.>", true},
		{"other prefix", "other.>", "molt.>", false},
		{"bare prefix is not below it", "molt", "molt.>", false},
		{"literal mismatch", "molt.a.b.c", "molt.a.b.d", false},
		{"too short for the pattern", "molt.*", "molt.*.*", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := subjectsOverlap(tt.a, tt.b); got != tt.want {
				t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
			if got := subjectsOverlap(tt.b, tt.a); got != tt.want {
				t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", tt.b, tt.a, got, tt.want)
			}
		})
	}
}

func TestStreamDrift(t *testing.T) {
	want, err := StreamConfig{}.jetstream()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		operate func(*jetstream.StreamConfig)
		want    []drift
	}{
		{"same", func(*jetstream.StreamConfig) {}, nil},
		{"description and max msgs are not molt's", func(c *jetstream.StreamConfig) { c.Description, c.MaxMsgs = "ops", 5 }, nil},
		{"subjects in another order", func(c *jetstream.StreamConfig) {
			c.Subjects = []string{"audit.>", "molt.>"}
		}, []drift{{"subjects", "[audit.> molt.>]", "[molt.>]"}}},
		{"replicas and limits", func(c *jetstream.StreamConfig) {
			c.Replicas, c.MaxAge, c.MaxBytes = 3, 30*24*time.Hour, 10<<30
		}, []drift{{"max_age", "720h0m0s", "168h0m0s"}, {"max_bytes", "10737418240", "1073741824"}, {"num_replicas", "3", "1"}}},
		{"policies", func(c *jetstream.StreamConfig) {
			c.Retention, c.Storage, c.Discard, c.Duplicates = jetstream.WorkQueuePolicy, jetstream.MemoryStorage, jetstream.DiscardNew, time.Minute
		}, []drift{{"retention", "WorkQueue", "Limits"}, {"storage", "Memory", "File"}, {"duplicate_window", "1m0s", "2m0s"},
			{"discard", "DiscardNew", "DiscardOld"}}},
		{"direct gets allowed", func(c *jetstream.StreamConfig) { c.AllowDirect = true }, []drift{{"allow_direct", "true", "false"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			running := want
			running.Subjects = slices.Clone(want.Subjects)
			tt.operate(&running)
			if got := streamDrift(running, want); !slices.Equal(got, tt.want) {
				t.Errorf("streamDrift = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConsumerDrift(t *testing.T) {
	want, err := ConsumerConfig{}.jetstream(ConsumerHookRunner)
	if err != nil {
		t.Fatal(err)
	}
	s := time.Second
	tests := []struct {
		name    string
		operate func(*jetstream.ConsumerConfig)
		want    []drift
	}{
		{"same", func(*jetstream.ConsumerConfig) {}, nil},
		{"filters and start are not drift", func(c *jetstream.ConsumerConfig) {
			c.FilterSubjects, c.DeliverPolicy = []string{"molt.>"}, jetstream.DeliverByStartTimePolicy
		}, nil},
		{"tuned", func(c *jetstream.ConsumerConfig) {
			c.AckWait, c.BackOff, c.MaxDeliver, c.MaxAckPending = 10*s, []time.Duration{10 * s}, 3, 50
		}, []drift{{"ack_wait", "10s", "30s"}, {"max_deliver", "3", "10"}, {"backoff", "[10s]", "[30s 1m0s 2m0s 4m0s]"},
			{"max_ack_pending", "50", "1000"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			running := want
			tt.operate(&running)
			if got := consumerDrift(running, want); !slices.Equal(got, tt.want) {
				t.Errorf("consumerDrift = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDeliverFrom(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		state     jetstream.StreamState
		want      jetstream.DeliverPolicy
		wantStart time.Time
	}{
		{"empty stream", jetstream.StreamState{}, jetstream.DeliverAllPolicy, time.Time{}},
		{"history within the window", jetstream.StreamState{Msgs: 3, FirstTime: now.Add(-59 * time.Minute)}, jetstream.DeliverAllPolicy, time.Time{}},
		{"first message exactly at the window", jetstream.StreamState{Msgs: 3, FirstTime: now.Add(-time.Hour)}, jetstream.DeliverAllPolicy, time.Time{}},
		{"days of history", jetstream.StreamState{Msgs: 9000, FirstTime: now.Add(-72 * time.Hour)}, jetstream.DeliverByStartTimePolicy, now.Add(-time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, start := deliverFrom(tt.state, now, time.Hour)
			var gotStart time.Time
			if start != nil {
				gotStart = *start
			}
			if got != tt.want || !gotStart.Equal(tt.wantStart) {
				t.Errorf("deliverFrom = %v, %v; want %v, %v", got, gotStart, tt.want, tt.wantStart)
			}
		})
	}
}

// driftGauge returns the drift gauge of one field, and how many drift series m has.
func driftGauge(m *Metrics, object, name, field string) (float64, int) {
	return testutil.ToFloat64(m.configDrift.WithLabelValues(object, name, field)), testutil.CollectAndCount(m.configDrift)
}

func newTestMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestEnsureStreamKeepsOperatorChanges: an operator's limits survive a restart, and are
// reported as drift until the operator or molt's config agrees again.
func TestEnsureStreamKeepsOperatorChanges(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	js := startJetStream(t)
	m := newTestMetrics(t)
	cfg := StreamConfig{Storage: jetstream.MemoryStorage, Metrics: m}
	s, err := EnsureStream(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.configDrift); n != 0 {
		t.Fatalf("drift series after create = %d, want 0", n)
	}

	operated := s.CachedInfo().Config // as `nats stream edit` would
	operated.MaxAge, operated.MaxBytes, operated.AllowDirect = 30*24*time.Hour, 4<<30, true
	if _, err := js.UpdateStream(ctx, operated); err != nil {
		t.Fatal(err)
	}
	// A restart: every service ensures the stream again.
	for range 2 {
		if s, err = EnsureStream(ctx, js, cfg); err != nil {
			t.Fatal(err)
		}
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.Config; c.MaxAge != 30*24*time.Hour || c.MaxBytes != 4<<30 || !c.AllowDirect {
		t.Errorf("running max age, max bytes, allow direct = %s, %d, %v; want the operator's 720h, 4GiB, true", c.MaxAge, c.MaxBytes, c.AllowDirect)
	}
	for _, field := range []string{"max_age", "max_bytes", "allow_direct"} {
		if v, n := driftGauge(m, objectStream, StreamName, field); v != 1 || n != 3 {
			t.Errorf("drift{%s} = %v with %d series, want 1 with 3", field, v, n)
		}
	}

	// Back to molt's values: the drift is gone.
	operated.MaxAge, operated.MaxBytes, operated.AllowDirect = DefaultMaxAge, DefaultMaxBytes, false
	if _, err := js.UpdateStream(ctx, operated); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.configDrift); n != 0 {
		t.Errorf("drift series after the operator reverted = %d, want 0", n)
	}
}

func TestEnsureStreamSubjects(t *testing.T) {
	tests := []struct {
		name     string
		subjects []string
		wantErr  string // empty: kept, subjects reported as drift
	}{
		{"foreign subjects", []string{"other.>"}, "cannot carry molt's events"},
		{"one namespace only", []string{"molt.team-a.>"}, ""},
		{"more than molt's", []string{"molt.>", "audit.>"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			js := startJetStream(t)
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: StreamName, Subjects: tt.subjects, Storage: jetstream.MemoryStorage}); err != nil {
				t.Fatal(err)
			}
			m := newTestMetrics(t)
			_, err := EnsureStream(ctx, js, StreamConfig{Storage: jetstream.MemoryStorage, Metrics: m})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("EnsureStream = %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v, _ := driftGauge(m, objectStream, StreamName, "subjects"); v != 1 {
				t.Errorf("drift{subjects} = %v, want 1", v)
			}
			s, err := js.Stream(ctx, StreamName)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config.Subjects; !slices.Equal(sortedSet(got), sortedSet(tt.subjects)) {
				t.Errorf("subjects = %v, want the operator's %v", got, tt.subjects)
			}
		})
	}
}

// TestEnsureConsumerKeepsTuningButSetsFilters: an operator's ack wait survives a restart and
// is reported; filter subjects are molt's and are set back (also what moves pod-ready off an
// older release's hookrunner consumer, onto hookrunner-post).
func TestEnsureConsumerKeepsTuningButSetsFilters(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	js := startJetStream(t)
	if _, err := EnsureStream(ctx, js, StreamConfig{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	m := newTestMetrics(t)
	cfg := ConsumerConfig{Metrics: m}
	c, err := EnsureConsumer(ctx, js, ConsumerHookRunner, cfg)
	if err != nil {
		t.Fatal(err)
	}

	operated := c.CachedInfo().Config // as `nats consumer edit` would
	operated.AckWait, operated.BackOff = time.Minute, nil
	// The filters of a hookrunner consumer made before postUpgrade had its own (and of an
	// operator's edit): both hook inputs.
	operated.FilterSubject, operated.FilterSubjects = "", []string{filterFor(TokenPatched), filterFor(TokenPodReady)}
	if _, err := js.UpdateConsumer(ctx, StreamName, operated); err != nil {
		t.Fatal(err)
	}
	if c, err = EnsureConsumer(ctx, js, ConsumerHookRunner, cfg); err != nil {
		t.Fatal(err)
	}
	got := consumerInfo(t, ctx, c).Config
	if got.AckWait != time.Minute || len(got.BackOff) != 0 {
		t.Errorf("ack wait, backoff = %s, %v; want the operator's 1m, none", got.AckWait, got.BackOff)
	}
	if want := FilterSubjects(ConsumerHookRunner); !slices.Equal(filtersOf(got), sortedSet(want)) {
		t.Errorf("filters = %v, want molt's %v", filtersOf(got), want)
	}
	for _, field := range []string{"ack_wait", "backoff"} {
		if v, n := driftGauge(m, objectConsumer, ConsumerHookRunner, field); v != 1 || n != 2 {
			t.Errorf("drift{%s} = %v with %d series, want 1 with 2", field, v, n)
		}
	}
}

// TestNewConsumerReplaysOnlyWindow: a consumer created on a stream whose history is older
// than the replay window starts within the window. The stream cannot be backdated, so the
// consumer is created at a "now" one window after the midpoint between two messages.
func TestNewConsumerReplaysOnlyWindow(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	js := startJetStream(t)
	s, err := EnsureStream(ctx, js, StreamConfig{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := NewPublisher(js, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, testEvent(TypeRequested, "team-a", "old", 0)); err != nil {
		t.Fatal(err)
	}
	old, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the clock to move past the old message", func() bool { return time.Since(old.Time) > 20*time.Millisecond })
	if err := pub.Publish(ctx, testEvent(TypeRequested, "team-a", "recent", 0)); err != nil {
		t.Fatal(err)
	}
	recent, err := s.GetMsg(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	window := time.Hour
	now := old.Time.Add(recent.Time.Sub(old.Time) / 2).Add(window)

	c, err := ensureConsumer(ctx, js, ConsumerPatcher, ConsumerConfig{ReplayWindow: window}, now)
	if err != nil {
		t.Fatal(err)
	}
	if info := consumerInfo(t, ctx, c); info.Config.DeliverPolicy != jetstream.DeliverByStartTimePolicy || info.NumPending != 1 {
		t.Fatalf("deliver policy %v, pending %d; want by start time, 1", info.Config.DeliverPolicy, info.NumPending)
	}
	batch, err := c.Fetch(2, jetstream.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for msg := range batch.Messages() {
		got = append(got, msg.Subject())
		if err := msg.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"molt.team-a.recent.requested"}; !slices.Equal(got, want) {
		t.Errorf("delivered %v, want %v", got, want)
	}

	// With the whole history inside the window, everything is delivered.
	c, err = ensureConsumer(ctx, js, ConsumerStatusAgg, ConsumerConfig{ReplayWindow: window}, recent.Time)
	if err != nil {
		t.Fatal(err)
	}
	if info := consumerInfo(t, ctx, c); info.Config.DeliverPolicy != jetstream.DeliverAllPolicy || info.NumPending != 2 {
		t.Errorf("deliver policy %v, pending %d; want all, 2", info.Config.DeliverPolicy, info.NumPending)
	}
}

func TestPublishSaysStreamIsMissing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	js := startJetStream(t)
	pub, err := NewPublisher(js, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = pub.Publish(ctx, testEvent(TypeRequested, "team-a", "sbx", 0))
	if err == nil || !strings.Contains(err.Error(), "stream "+StreamName+" does not exist") {
		t.Fatalf("Publish without a stream = %v, want it to say the stream does not exist", err)
	}
}

// TestEndpointReattaches: deleting the stream or the consumer under a running
// Endpoint.Consume neither ends it nor stops the service: both come back and new events are
// handled.
func TestEndpointReattaches(t *testing.T) {
	tests := []struct {
		name   string
		delete func(context.Context, jetstream.JetStream) error
	}{
		{"stream deleted", func(ctx context.Context, js jetstream.JetStream) error {
			return js.DeleteStream(ctx, StreamName)
		}},
		{"consumer deleted", func(ctx context.Context, js jetstream.JetStream) error {
			return js.DeleteConsumer(ctx, StreamName, ConsumerPatcher)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			js := startJetStream(t)
			ep, err := Open(ctx, js, prometheus.NewRegistry(), ConsumerPatcher, StreamConfig{Storage: jetstream.MemoryStorage}, ConsumerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			var rec recorder
			handled := func(name string) bool {
				return slices.ContainsFunc(rec.snapshot(), func(m *Message) bool { return m.Event.Data.Sandbox.Name == name })
			}
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- ep.Consume(ctx, func(_ context.Context, m *Message) error { rec.add(m); return nil }, WithPullWait(500*time.Millisecond))
			}()
			t.Cleanup(func() {
				cancel()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("Consume returned %v after cancel, want nil", err)
					}
				case <-time.After(pollTimeout):
					t.Errorf("Consume did not return within %s of cancel", pollTimeout)
				}
			})

			if err := ep.Publisher.Publish(ctx, testEvent(TypeRequested, "team-a", "before", 0)); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the event before the deletion to be handled", func() bool { return handled("before") })
			if err := tt.delete(ctx, js); err != nil {
				t.Fatal(err)
			}
			// Publishing fails until the stream is back, then the event is handled.
			eventually(t, "a publish to succeed after the deletion", func() bool {
				return ep.Publisher.Publish(ctx, testEvent(TypeRequested, "team-a", "after", 0)) == nil
			})
			eventually(t, "the event after the deletion to be handled", func() bool { return handled("after") })
			select {
			case err := <-done:
				t.Fatalf("Consume returned %v while it should re-attach", err)
			default:
			}
			c, err := js.Consumer(ctx, StreamName, ConsumerPatcher)
			if err != nil {
				t.Fatalf("consumer after re-attach: %v", err)
			}
			if got := filtersOf(c.CachedInfo().Config); !slices.Equal(got, sortedSet(FilterSubjects(ConsumerPatcher))) {
				t.Errorf("filters after re-attach = %v", got)
			}
		})
	}
}

// TestOpenPublishOnly: a publish-only endpoint (the selector's) ensures the
// stream, creates no consumer, publishes, and refuses to consume.
func TestOpenPublishOnly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	js := startJetStream(t)
	ep, err := Open(ctx, js, prometheus.NewRegistry(), "selector", StreamConfig{Storage: jetstream.MemoryStorage}, ConsumerConfig{PublishOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatalf("stream %s: %v", StreamName, err)
	}
	if n := s.CachedInfo().State.Consumers; n != 0 {
		t.Errorf("%d consumers on the stream, want none", n)
	}
	if err := ep.Publisher.Publish(ctx, sampleEvent(TypeRequested)); err != nil {
		t.Fatalf("publish: %v", err)
	}
	err = ep.Consume(ctx, func(context.Context, *Message) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "PublishOnly") {
		t.Fatalf("Consume on a publish-only endpoint: %v, want a refusal naming PublishOnly", err)
	}
}

// TestOpenWaitsForJetStream: a service that starts before its NATS server
// (or while a cluster elects its leader) does not exit: Open keeps trying
// and attaches once JetStream answers; a config no retry can fix is refused
// at once.
func TestOpenWaitsForJetStream(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, js, prometheus.NewRegistry(), ConsumerPatcher, StreamConfig{Replicas: -1}, ConsumerConfig{}); !errors.Is(err, ErrUnusable) {
		t.Fatalf("Open with an invalid stream config: %v, want ErrUnusable at once", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Open(ctx, js, prometheus.NewRegistry(), ConsumerPatcher, StreamConfig{Storage: jetstream.MemoryStorage}, ConsumerConfig{})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Open returned %v before any NATS server ran", err)
	case <-time.After(1500 * time.Millisecond):
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Open after JetStream came up: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Open did not attach within 20s of JetStream coming up")
	}
}
