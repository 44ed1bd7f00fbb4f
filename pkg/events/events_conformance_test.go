package events

// Conformance: the package against a real, in-process JetStream server. Each test starts its
// own server (Port -1, store in t.TempDir()) because the durable consumer names and the
// molt.> stream are fixed: tests cannot share them without seeing each other's messages.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"k8s.io/klog/v2/ktesting"
)

// pollTimeout bounds every wait for a condition; generous for -race on 2 cores.
const pollTimeout = 20 * time.Second

// startJetStream starts an in-process NATS server with JetStream and returns a client for
// it; both are stopped when the test ends.
func startJetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		t.Fatalf("new nats server: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("nats server not ready for connections within 10s")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		srv.Shutdown()
		t.Fatalf("connect %s: %v", srv.ClientURL(), err)
	}
	t.Cleanup(func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

func TestDuplicatePublishIsDropped(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, ctx, ConsumerHookRunner, ConsumerConfig{})
	ev := testEvent(TypePatched, "team-a", "web.v1", 1)
	f.publish(t, ctx, ev, ev) // a redelivered handler publishing the same outcome again
	f.publish(t, ctx, testEvent(TypePatched, "team-a", "web.v1", 2))

	s, err := f.js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2 (the duplicate dropped)", info.State.Msgs)
	}
	raw, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := "molt.team-a.web%2Ev1.patched"; raw.Subject != want {
		t.Errorf("subject %q, want %q", raw.Subject, want)
	}
	if got := raw.Header.Get(jetstream.MsgIDHeader); got != MessageID(ev) {
		t.Errorf("Nats-Msg-Id %q, want %q", got, MessageID(ev))
	}
	if got := raw.Header.Get("Content-Type"); got != MediaType {
		t.Errorf("Content-Type %q, want %q", got, MediaType)
	}
	got, err := Decode(raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != MessageID(ev) || got.Source != "test" || got.Data.Sandbox != ev.Data.Sandbox || got.Type != TypePatched {
		t.Errorf("decoded %+v", got)
	}
	if n := testutil.ToFloat64(f.metrics.published.WithLabelValues(TypePatched, publishDuplicate)); n != 1 {
		t.Errorf("published duplicate = %v, want 1", n)
	}
	if n := testutil.ToFloat64(f.metrics.published.WithLabelValues(TypePatched, publishStored)); n != 2 {
		t.Errorf("published stored = %v, want 2", n)
	}
}

func TestFailedHandlerIsRedelivered(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, ctx, ConsumerHookRunner, ConsumerConfig{AckWait: 2 * time.Second})
	plain := testEvent(TypePatched, "team-a", "plain", 1)
	delayed := testEvent(TypePatched, "team-a", "delayed", 1)
	f.publish(t, ctx, plain, delayed)

	const retryAfter = 300 * time.Millisecond
	var rec recorder
	var mu sync.Mutex
	seen := map[string][]time.Time{}
	f.consume(t, ctx, func(ctx context.Context, m *Message) error {
		rec.add(m)
		mu.Lock()
		seen[m.Event.Data.Sandbox.Name] = append(seen[m.Event.Data.Sandbox.Name], time.Now())
		mu.Unlock()
		switch {
		case m.NumDelivered > 1:
			return nil
		case m.Event.Data.Sandbox.Name == "delayed":
			return Retry(errors.New("pod not ready yet"), retryAfter)
		default:
			return errors.New("apiserver unavailable")
		}
	}, WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))

	eventually(t, "both messages handled twice and acked", func() bool {
		info := consumerInfo(t, ctx, f.cons)
		return rec.len() == 4 && info.NumAckPending == 0 && info.NumPending == 0
	})
	for _, m := range rec.snapshot() {
		if m.NumDelivered > 2 {
			t.Errorf("%s delivered %d times, want 2", m.Subject, m.NumDelivered)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if d := seen["delayed"]; len(d) != 2 || d[1].Sub(d[0]) < retryAfter {
		t.Errorf("Retry(err, %s) redelivered after %v, want at least the delay", retryAfter, d)
	}
	for result, want := range map[string]float64{resultRetry: 2, resultAck: 2} {
		if n := testutil.ToFloat64(f.metrics.handled.WithLabelValues(ConsumerHookRunner, TypePatched, result)); n != want {
			t.Errorf("handled %s = %v, want %v", result, n, want)
		}
	}
}

func TestOrderPerSubjectWithWorkers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, ctx, ConsumerStatusAgg, ConsumerConfig{})
	sandboxes := []string{"a", "b.dotted", "c"}
	const perSandbox = 15
	for i := range perSandbox {
		for _, s := range sandboxes {
			f.publish(t, ctx, testEvent(TypePatched, "team-a", s, i))
		}
	}

	var mu sync.Mutex
	order := map[string][]string{}
	active := map[string]int{}
	running, maxRunning, overlaps := 0, 0, 0
	f.consume(t, ctx, func(ctx context.Context, m *Message) error {
		mu.Lock()
		if active[m.Subject]++; active[m.Subject] > 1 {
			overlaps++
		}
		running++
		maxRunning = max(maxRunning, running)
		mu.Unlock()

		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // simulated work: shuffle interleavings

		mu.Lock()
		order[m.Subject] = append(order[m.Subject], m.Event.Data.Attempt)
		active[m.Subject]--
		running--
		mu.Unlock()
		return nil
	}, WithWorkers(4))

	eventually(t, "all events handled", func() bool { return settled(t, ctx, f.cons) })
	mu.Lock()
	defer mu.Unlock()
	if overlaps != 0 {
		t.Errorf("%d times two handlers ran on one subject", overlaps)
	}
	if maxRunning > 4 {
		t.Errorf("%d handlers ran at once, want at most 4 workers", maxRunning)
	}
	for _, s := range sandboxes {
		subject := SandboxSubject("team-a", s, TokenPatched)
		var want []string
		for i := range perSandbox {
			want = append(want, fmt.Sprint(i))
		}
		if !slices.Equal(order[subject], want) {
			t.Errorf("%s handled in order %v, want %v", subject, order[subject], want)
		}
	}
}

func TestSlowSandboxDoesNotBlockOthers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, ctx, ConsumerHookRunner, ConsumerConfig{})
	f.publish(t, ctx,
		testEvent(TypePatched, "team-a", "slow", 0), testEvent(TypePatched, "team-a", "slow", 1),
		testEvent(TypePatched, "team-a", "fast", 0), testEvent(TypePatched, "team-a", "fast", 1),
		testEvent(TypePatched, "team-a", "fast", 2))

	fastDone := make(chan struct{})
	var rec recorder
	f.consume(t, ctx, func(ctx context.Context, m *Message) error {
		d := m.Event.Data
		if d.Sandbox.Name == "slow" && d.Attempt == "0" {
			select { // a long hook: held until the other sandbox is through
			case <-fastDone:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		rec.add(m)
		if d.Sandbox.Name == "fast" && d.Attempt == "2" {
			close(fastDone)
		}
		return nil
	}, WithWorkers(2))

	eventually(t, "all events handled", func() bool { return settled(t, ctx, f.cons) })
	var got []string
	for _, m := range rec.snapshot() {
		got = append(got, m.Event.Data.Sandbox.Name+"/"+m.Event.Data.Attempt)
	}
	if want := []string{"fast/0", "fast/1", "fast/2", "slow/0", "slow/1"}; !slices.Equal(got, want) {
		t.Errorf("handled %v, want %v", got, want)
	}
}

func TestPoisonMessageIsTerminated(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, ctx, ConsumerHookRunner, ConsumerConfig{})
	subject := SandboxSubject("team-a", "sbx-1", TokenPatched)
	poison := []byte("{not json")
	if _, err := f.js.Publish(ctx, subject, poison); err != nil {
		t.Fatal(err)
	}
	f.publish(t, ctx, testEvent(TypePatched, "team-a", "sbx-1", 1))

	var mu sync.Mutex
	var dead []Terminated
	var rec recorder
	f.consume(t, ctx, func(ctx context.Context, m *Message) error {
		rec.add(m)
		return nil
	}, OnTerminated(func(_ context.Context, tm Terminated) {
		mu.Lock()
		defer mu.Unlock()
		dead = append(dead, tm)
	}))

	eventually(t, "poison terminated and the next event on its subject handled", func() bool {
		return rec.len() == 1 && settled(t, ctx, f.cons)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(dead) != 1 {
		t.Fatalf("terminated %d messages, want 1: %+v", len(dead), dead)
	}
	d := dead[0]
	if d.Reason != resultPoison || d.Seq != 1 || d.NumDelivered != 1 || d.Event != nil || !bytes.Equal(d.Body, poison) ||
		!errors.Is(d.Err, ErrUndecodable) || d.Subject != subject || d.Consumer != ConsumerHookRunner {
		t.Errorf("terminated = %+v", d)
	}
	if n := testutil.ToFloat64(f.metrics.handled.WithLabelValues(ConsumerHookRunner, typeUnknown, resultPoison)); n != 1 {
		t.Errorf("handled poison = %v, want 1", n)
	}
	if got := rec.snapshot()[0]; got.Seq != 2 || got.NumDelivered != 1 {
		t.Errorf("valid event seq %d delivered %d, want 2 and 1", got.Seq, got.NumDelivered)
	}
}

func TestPermanentAndExhaustedAreTerminated(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, ctx, ConsumerPodCycler, ConsumerConfig{MaxDeliver: 2})
	f.publish(t, ctx, testEvent(TypePreHookDone, "team-a", "bad-input", 1), testEvent(TypePreHookDone, "team-a", "flaky", 1))

	var mu sync.Mutex
	dead := map[string]Terminated{}
	var rec recorder
	f.consume(t, ctx, func(ctx context.Context, m *Message) error {
		rec.add(m)
		if m.Event.Data.Sandbox.Name == "bad-input" {
			return Permanent(errors.New("template cannot be patched"))
		}
		if m.LastDelivery() != (m.NumDelivered == 2) {
			t.Errorf("LastDelivery() = %v on delivery %d of 2", m.LastDelivery(), m.NumDelivered)
		}
		return errors.New("still failing")
	}, WithRetryBackoff(10*time.Millisecond, 10*time.Millisecond), OnTerminated(func(_ context.Context, tm Terminated) {
		mu.Lock()
		defer mu.Unlock()
		dead[tm.Event.Data.Sandbox.Name] = tm
	}))

	eventually(t, "both terminated", func() bool {
		mu.Lock()
		n := len(dead)
		mu.Unlock()
		info := consumerInfo(t, ctx, f.cons)
		return n == 2 && info.NumAckPending == 0 && info.NumPending == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if d := dead["bad-input"]; d.Reason != resultPermanent || d.NumDelivered != 1 || !errors.Is(d.Err, ErrPermanent) {
		t.Errorf("bad-input terminated = %+v", d)
	}
	if d := dead["flaky"]; d.Reason != resultExhausted || d.NumDelivered != 2 {
		t.Errorf("flaky terminated = %+v", d)
	}
	if n := rec.len(); n != 3 {
		t.Errorf("handler called %d times, want 3 (1 permanent + 2 deliveries)", n)
	}
}

func TestConsumeStopsOnCancel(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	// AckWait far beyond the poll timeout: the next consumer sees the messages only if the
	// stopping loop Naks them.
	f := newFixture(t, ctx, ConsumerPodCycler, ConsumerConfig{AckWait: time.Minute})
	f.publish(t, ctx, testEvent(TypePreHookDone, "team-a", "sbx", 0), testEvent(TypePreHookDone, "team-a", "sbx", 1))

	before := goleak.IgnoreCurrent()
	started := make(chan struct{})
	handlerErr := make(chan error, 1)
	stop := f.consume(t, ctx, func(ctx context.Context, m *Message) error {
		close(started) // only attempt 0 runs before the cancel
		<-ctx.Done()   // a hook interrupted by shutdown
		err := fmt.Errorf("run hook: %w", ctx.Err())
		handlerErr <- err
		return err
	}, WithWorkers(2))
	select {
	case <-started:
	case <-time.After(pollTimeout):
		t.Fatal("handler not started")
	}
	stop() // cancels and fails the test unless Consume returns nil promptly
	if err := <-handlerErr; !errors.Is(err, context.Canceled) {
		t.Errorf("handler ctx ended with %v, want context.Canceled", err)
	}
	goleak.VerifyNone(t, before)

	var rec recorder
	f.consume(t, ctx, func(ctx context.Context, m *Message) error {
		rec.add(m)
		return nil
	})
	eventually(t, "both messages handled by the next consumer", func() bool {
		info := consumerInfo(t, ctx, f.cons)
		return rec.len() == 2 && info.NumAckPending == 0
	})
	if got := rec.snapshot(); got[0].Event.Data.Attempt != "0" || got[0].NumDelivered != 2 || got[1].Event.Data.Attempt != "1" {
		t.Errorf("after restart handled %s (delivery %d), %s; want 0 (delivery 2), then 1",
			got[0].Event.Data.Attempt, got[0].NumDelivered, got[1].Event.Data.Attempt)
	}
}

func TestInProgressKeepsSlowHandlerAlive(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const ackWait = time.Second
	f := newFixture(t, ctx, ConsumerHookRunner, ConsumerConfig{AckWait: ackWait})
	// attempt 1 waits behind attempt 0 on the same subject: kept alive while queued, too.
	f.publish(t, ctx, testEvent(TypePodReady, "team-a", "sbx", 0), testEvent(TypePodReady, "team-a", "sbx", 1))

	var rec recorder
	f.consume(t, ctx, func(ctx context.Context, m *Message) error {
		rec.add(m)
		if m.Event.Data.Attempt == "0" {
			select { // simulated work: a postUpgrade hook three times longer than AckWait
			case <-time.After(3 * ackWait):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})

	eventually(t, "both handled and acked", func() bool {
		info := consumerInfo(t, ctx, f.cons)
		return rec.len() >= 2 && info.NumAckPending == 0 && info.NumPending == 0
	})
	if n := rec.len(); n != 2 {
		t.Errorf("handler called %d times, want 2 (no redelivery)", n)
	}
	if info := consumerInfo(t, ctx, f.cons); info.NumRedelivered != 0 || info.Delivered.Consumer != 2 {
		t.Errorf("consumer redelivered %d, delivered %d; want 0 and 2", info.NumRedelivered, info.Delivered.Consumer)
	}
	for _, m := range rec.snapshot() {
		if m.NumDelivered != 1 {
			t.Errorf("attempt %s delivered %d times, want once", m.Event.Data.Attempt, m.NumDelivered)
		}
	}
}
