package hookrunner

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"molt.dev/pkg/events"
)

// What follows a hook that succeeded outlives the process's context by wait
// (a shutdown still reports what ran), and otherwise runs up to max (a NATS
// outage the report waits through), not longer.
func TestFinishingOutlivesItsContextByWaitOnly(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	out, cancel := finishing(ctx, 200*time.Millisecond, time.Hour)
	defer cancel()
	stop()
	select {
	case <-out.Done():
		t.Fatal("ended with the process's context, want wait later")
	case <-time.After(50 * time.Millisecond):
	}
	select {
	case <-out.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10s after the process's context ended, want wait (200ms) later")
	}

	out, cancel = finishing(context.Background(), time.Hour, 100*time.Millisecond)
	defer cancel()
	select {
	case <-out.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10s on, want max (100ms)")
	}
	if out.Err() != context.DeadlineExceeded {
		t.Errorf("ended with %v, want its deadline", out.Err())
	}
}

// refusingJS answers the first refusals publishes with no responders (JetStream
// not back yet after NATS restarted: nothing is stored), then records.
type refusingJS struct {
	unreachableJS
	refusals int
}

// unreachableJS records what is published, and has no connection or stream to
// tell of (a publish error asks for both).
type unreachableJS struct {
	recordingJS
}

func (*unreachableJS) Conn() *nats.Conn { return nil }

func (*unreachableJS) Stream(context.Context, string) (jetstream.Stream, error) {
	return nil, nats.ErrNoResponders
}

func (r *refusingJS) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if r.refusals > 0 {
		r.refusals--
		return nil, jetstream.ErrNoStreamResponse
	}
	return r.recordingJS.PublishMsg(ctx, msg, opts...)
}

// The report of a hook that succeeded is sent again while NATS refuses it,
// until its context ends: given up, the redelivery of a pod deleted
// meanwhile would file PreUpgradeFailed over the backup it made.
func TestReportIsSentAgainWhileNATSRefusesIt(t *testing.T) {
	ev := events.Event{Type: events.TypePreHookDone, Data: events.Data{Ops: events.OpsRef{Name: "ops1", UID: "a1"},
		Sandbox: events.SandboxRef{Namespace: "ns", Name: "box", UID: "sb"}, Attempt: "a1"}}
	js := &refusingJS{refusals: 2}
	pub, err := events.NewPublisher(js, "hookrunner", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &HookRunner{publisher: pub}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.publishPatiently(ctx, ev); err != nil || len(js.published) != 1 || js.published[0].Type != events.TypePreHookDone {
		t.Fatalf("publishPatiently = %v, published %v; want prehook-done once NATS took it", err, js.published)
	}

	js = &refusingJS{refusals: 1 << 20}
	if pub, err = events.NewPublisher(js, "hookrunner", nil); err != nil {
		t.Fatal(err)
	}
	h = &HookRunner{publisher: pub}
	short, cancelShort := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancelShort()
	if err := h.publishPatiently(short, ev); err == nil || len(js.published) != 0 {
		t.Fatalf("publishPatiently with NATS refusing past its context = %v, published %v; want the error", err, js.published)
	}
}

// hangingJS never answers the first publish (NATS died after taking it),
// then records.
type hangingJS struct {
	unreachableJS
	hung bool
}

func (h *hangingJS) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if !h.hung {
		h.hung = true
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.recordingJS.PublishMsg(ctx, msg, opts...)
}

// A send whose answer never comes is given up after reportTry and sent
// again, not waited on for the whole report window (the CI run where NATS
// was killed right after a postUpgrade: the report waited 5 minutes, and the
// watchdog failed the attempt).
func TestReportWhoseAnswerIsLostIsSentAgain(t *testing.T) {
	was := reportTry
	reportTry = 200 * time.Millisecond
	defer func() { reportTry = was }()
	ev := events.Event{Type: events.TypePostHookDone, Data: events.Data{Ops: events.OpsRef{Name: "ops1", UID: "a1"},
		Sandbox: events.SandboxRef{Namespace: "ns", Name: "box", UID: "sb"}, Attempt: "a1"}}
	js := &hangingJS{}
	pub, err := events.NewPublisher(js, "hookrunner", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &HookRunner{publisher: pub}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := h.publishPatiently(ctx, ev); err != nil || len(js.published) != 1 {
		t.Fatalf("publishPatiently = %v, published %v; want the report sent again", err, js.published)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %s: the lost send was waited on", took)
	}
}
