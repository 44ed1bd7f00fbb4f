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
	"sync/atomic"
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
	stop := f.consume(t, ctx, func(ctx context.Context, m *Message) error {
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
	// A worker sends its ack before it records the result, and the two subjects run in
	// different workers: the server can show nothing pending while a count is still to come.
	// Consume returns only after its workers, so the counts are final once it has stopped.
	stop()
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
	f := newFixture(t, ctx, ConsumerHookRunnerPost, ConsumerConfig{AckWait: ackWait})
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

// TestConsumeStopsPromptlyUnderLoad stops and restarts Consume on one durable while events
// keep arriving (the production pattern behind rolling restarts). Each stop must return
// within 4s with a 2s pull wait: a loop that goes on pulling after the cancel (a random
// select between a free slot and ctx.Done) would show as a slow return on some of the 15
// cycles. No message may reach the handler once the cancel has returned, every message
// delivered after it is Nak'd at once, and nothing is left for AckWait (1m) to redeliver.
func TestConsumeStopsPromptlyUnderLoad(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, ctx, ConsumerHookRunner, ConsumerConfig{AckWait: time.Minute, MaxDeliver: -1})

	// A publish every 50ms, one in ten for the sandbox "slow", whose handler takes 200ms
	// unless its context is cancelled first (an interrupted hook).
	var published atomic.Int64
	pubCtx, stopPublishing := context.WithCancel(ctx)
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			name := fmt.Sprintf("s%d", i%4)
			if i%10 == 0 {
				name = "slow"
			}
			if err := f.pub.Publish(pubCtx, testEvent(TypePatched, "team-a", name, i)); err != nil {
				if pubCtx.Err() == nil {
					t.Errorf("publish %d: %v", i, err)
				}
				return
			}
			published.Store(int64(i + 1))
			select {
			case <-pubCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { stopPublishing(); <-pubDone }()

	// The bounds below are fractions of the pull wait because what a broken loop shows grows
	// with it, while a correct loop's delays are scheduling delays, which do not: a pull
	// request ends up to pullWait after the cancel, so a loop that Naks messages received
	// after the cancel only when the request ends, or still starts held messages until then,
	// shows delays spread up to pullWait. A long pull wait leaves room for GC pauses and CPU
	// steal on a loaded machine under -race without letting those through.
	const (
		cycles    = 15
		pullWait  = 2 * time.Second
		stopBound = pullWait + 2*time.Second
		nakBound  = pullWait / 2 // "at once": half the cycles would see a Nak at the request's end beyond it
		// A worker that passed its stop check just before the cancel may enter the handler
		// a scheduling delay later; a loop still handing out work would start handlers later.
		commitSlack = pullWait / 4
	)
	var ackMu sync.Mutex
	acked := map[string]bool{} // attempts handled successfully, over all cycles
	ack := func(m *Message) {
		ackMu.Lock()
		defer ackMu.Unlock()
		acked[m.Event.Data.Attempt] = true
	}
	for cycle := range cycles {
		rc := &recordingConsumer{Consumer: f.cons}
		var (
			cancelled atomic.Bool
			inFlight  atomic.Int32
			mu        sync.Mutex
			handled   []*recordedMsg
			late      []time.Time // handler entries seen after the cancel returned
		)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Consume(runCtx, rc, func(ctx context.Context, m *Message) error {
				inFlight.Add(1)
				defer inFlight.Add(-1)
				now := time.Now()
				mu.Lock()
				handled = append(handled, m.h.msg.(*recordedMsg))
				if cancelled.Load() {
					late = append(late, now)
				}
				mu.Unlock()
				work := time.Duration(rand.IntN(5)) * time.Millisecond
				if m.Event.Data.Sandbox.Name == "slow" {
					work = 200 * time.Millisecond
				}
				select {
				case <-time.After(work):
				case <-ctx.Done():
					return fmt.Errorf("run hook: %w", ctx.Err())
				}
				ack(m)
				return nil
				// 64 slots: more than one pull request gets in its 2s at 20 events/s, so pulls
				// end at their expiry with free slots, the state in which a loop that selected
				// between a free slot and ctx.Done went on pulling after the cancel.
			}, WithMetrics(f.metrics), WithPullWait(pullWait), WithWorkers(32))
		}()
		// Cancel at a random point of the pull cycle.
		time.Sleep(100*time.Millisecond + rand.N(pullWait))
		cancel()
		cancelledAt := time.Now()
		cancelled.Store(true)

		var returnedAt time.Time
		select {
		case err := <-done:
			returnedAt = time.Now()
			if err != nil {
				t.Fatalf("cycle %d: Consume: %v", cycle, err)
			}
		case <-time.After(pollTimeout):
			t.Fatalf("cycle %d: Consume did not return within %s of cancel", cycle, pollTimeout)
		}
		took := returnedAt.Sub(cancelledAt)
		t.Logf("cycle %d: Consume returned %s after cancel", cycle, took)
		if took > stopBound {
			t.Errorf("cycle %d: Consume returned %s after cancel, want at most %s", cycle, took, stopBound)
		}
		if n := inFlight.Load(); n != 0 {
			t.Errorf("cycle %d: %d handlers still running when Consume returned", cycle, n)
		}

		mu.Lock()
		for _, rm := range handled {
			if rm.received.After(cancelledAt) {
				t.Errorf("cycle %d: seq %d received %s after cancel and handed to the handler",
					cycle, rm.seq, rm.received.Sub(cancelledAt))
			}
		}
		for _, at := range late {
			if d := at.Sub(cancelledAt); d > commitSlack {
				t.Errorf("cycle %d: a handler started %s after cancel returned", cycle, d)
			}
		}
		mu.Unlock()

		seen := map[uint64]bool{} // delivered earlier in this cycle
		for _, rm := range rc.deliveries() {
			again := seen[rm.seq]
			seen[rm.seq] = true
			how, settledAt := rm.settlement()
			switch {
			case how == "":
				t.Errorf("cycle %d: seq %d (delivery %d) not settled when Consume returned", cycle, rm.seq, rm.delivered)
				continue
			case settledAt.After(returnedAt):
				t.Errorf("cycle %d: seq %d settled (%s) %s after Consume returned", cycle, rm.seq, how, settledAt.Sub(returnedAt))
			}
			if !rm.received.After(cancelledAt) {
				continue
			}
			if how != "nak" {
				t.Errorf("cycle %d: seq %d received after cancel was settled with %s, want nak", cycle, rm.seq, how)
			}
			// The server may hand a message the stopping loop Nak'd straight back to its
			// last pull request (no other replica waits here); that copy is Nak'd when the
			// pull request ends, within the stop bound checked above.
			if d := settledAt.Sub(rm.received); !again && d > nakBound {
				t.Errorf("cycle %d: seq %d received after cancel was Nak'd after %s, want at once", cycle, rm.seq, d)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	stopPublishing()
	<-pubDone

	// Everything published is handled by the next consumer well within AckWait: no stop
	// left a message held without an ack.
	total := int(published.Load())
	f.consume(t, ctx, func(ctx context.Context, m *Message) error {
		ack(m)
		return nil
	}, WithWorkers(8))
	deadline := time.Now().Add(pollTimeout)
	for {
		ackMu.Lock()
		n := len(acked)
		ackMu.Unlock()
		if n == total && settled(t, ctx, f.cons) {
			break
		}
		if time.Now().After(deadline) {
			var missing []int
			ackMu.Lock()
			for i := range total {
				if !acked[fmt.Sprint(i)] {
					missing = append(missing, i)
				}
			}
			ackMu.Unlock()
			info := consumerInfo(t, ctx, f.cons)
			t.Fatalf("after %s: %d of %d events acked (missing attempts %v); consumer pending %d, ack pending %d, redelivered %d",
				pollTimeout, n, total, missing, info.NumPending, info.NumAckPending, info.NumRedelivered)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recordingConsumer records every message its Fetch delivers and how Consume settles it.
type recordingConsumer struct {
	jetstream.Consumer
	mu   sync.Mutex
	msgs []*recordedMsg
}

func (c *recordingConsumer) Fetch(n int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	b, err := c.Consumer.Fetch(n, opts...)
	if err != nil {
		return nil, err
	}
	rb := &recordedBatch{inner: b, msgs: make(chan jetstream.Msg, n)}
	go func() {
		defer close(rb.msgs)
		for m := range b.Messages() {
			rm := &recordedMsg{Msg: m, received: time.Now()}
			if meta, err := m.Metadata(); err == nil {
				rm.seq, rm.delivered = meta.Sequence.Stream, meta.NumDelivered
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, rm)
			c.mu.Unlock()
			rb.msgs <- rm
		}
	}()
	return rb, nil
}

func (c *recordingConsumer) deliveries() []*recordedMsg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

type recordedBatch struct {
	inner jetstream.MessageBatch
	msgs  chan jetstream.Msg
}

func (b *recordedBatch) Messages() <-chan jetstream.Msg { return b.msgs }

// Error is read once Messages is closed, i.e. after the inner batch's channel closed.
func (b *recordedBatch) Error() error { return b.inner.Error() }

type recordedMsg struct {
	jetstream.Msg
	received       time.Time
	seq, delivered uint64
	mu             sync.Mutex
	how            string // ack, nak or term: the first settlement
	settledAt      time.Time
}

func (m *recordedMsg) settle(how string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.how == "" {
		m.how, m.settledAt = how, time.Now()
	}
}

func (m *recordedMsg) settlement() (string, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.how, m.settledAt
}

func (m *recordedMsg) Ack() error { m.settle("ack"); return m.Msg.Ack() }
func (m *recordedMsg) Nak() error { m.settle("nak"); return m.Msg.Nak() }
func (m *recordedMsg) NakWithDelay(d time.Duration) error {
	m.settle("nak")
	return m.Msg.NakWithDelay(d)
}
func (m *recordedMsg) Term() error { m.settle("term"); return m.Msg.Term() }
func (m *recordedMsg) TermWithReason(r string) error {
	m.settle("term")
	return m.Msg.TermWithReason(r)
}
