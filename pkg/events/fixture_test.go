package events

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// fixture is a server with the stream, one consumer, a publisher and metrics.
type fixture struct {
	js      jetstream.JetStream
	cons    jetstream.Consumer
	pub     *Publisher
	metrics *Metrics
}

func newFixture(t *testing.T, ctx context.Context, consumer string, cfg ConsumerConfig) *fixture {
	t.Helper()
	js := startJetStream(t)
	if _, err := EnsureStream(ctx, js, StreamConfig{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	cons, err := EnsureConsumer(ctx, js, consumer, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	pub, err := NewPublisher(js, "test", m)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{js: js, cons: cons, pub: pub, metrics: m}
}

func (f *fixture) publish(t *testing.T, ctx context.Context, evs ...Event) {
	t.Helper()
	for _, ev := range evs {
		if err := f.pub.Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
}

// consume runs Consume until the test ends (or until the returned stop is called) and fails
// the test if it returns an error.
func (f *fixture) consume(t *testing.T, ctx context.Context, h Handler, opts ...ConsumeOption) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	// A short pull wait keeps each stop short: stopping waits for the outstanding pull.
	opts = append([]ConsumeOption{WithMetrics(f.metrics), WithPullWait(500 * time.Millisecond)}, opts...)
	go func() { done <- Consume(ctx, f.cons, h, opts...) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Consume: %v", err)
				}
			case <-time.After(pollTimeout):
				t.Errorf("Consume did not return within %s of cancel", pollTimeout)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// eventually polls cond every 10ms until it returns true or pollTimeout passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", pollTimeout, what)
		}
		<-time.After(10 * time.Millisecond)
	}
}

func consumerInfo(t *testing.T, ctx context.Context, c jetstream.Consumer) *jetstream.ConsumerInfo {
	t.Helper()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// settled reports whether the consumer has delivered everything and holds no unacked message.
func settled(t *testing.T, ctx context.Context, c jetstream.Consumer) bool {
	info := consumerInfo(t, ctx, c)
	return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
}

func testEvent(typ, namespace, name string, attempt int) Event {
	return Event{Type: typ, Data: Data{
		Ops:     OpsRef{Name: "ops-1", UID: "ops-uid-1"},
		Sandbox: SandboxRef{Namespace: namespace, Name: name, UID: types.UID("uid-" + name)},
		Attempt: fmt.Sprint(attempt),
	}}
}

// recorder collects handler calls.
type recorder struct {
	mu    sync.Mutex
	calls []*Message
}

func (r *recorder) add(m *Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, m)
}

func (r *recorder) snapshot() []*Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (r *recorder) len() int { return len(r.snapshot()) }
