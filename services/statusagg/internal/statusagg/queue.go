package statusagg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
)

// A stage past its deadline is not always stalled: with more sandboxes in a hook stage than
// hookrunner runs hooks at once (--max-hooks per replica), the later ones wait in the
// consumer's queue, and the wait grows with the number admitted. Re-driving them adds copies
// to the same queue and failing them fails sandboxes nothing is wrong with (a new pod left
// without its postUpgrade restore). So before the watchdog judges a stage, it asks JetStream
// whether the stage's input event of this attempt is still waiting at the consumer that
// handles it, and leaves the stage alone while it is (queued).

// stageInput is an event that drives a stage and the consumer that handles it.
type stageInput struct {
	eventType, consumer string
}

// stageInputs are, per stage, the events the watchdog looks for in the consumers' queues.
// PreUpgrade is driven by requested (patcher) and then patched (hookrunner). A re-drive is
// on a subject of its own (events.TypeRedrivePreHookDone, ...), looked for beside the
// input it stands for: a re-drive still queued is not a stall either.
var stageInputs = map[string][]stageInput{
	agentsv1alpha1.UpgradingReasonPreUpgrade: {{events.TypePatched, events.ConsumerHookRunner}, {events.TypeRequested, events.ConsumerPatcher},
		{events.TypeRedriveRequested, events.ConsumerPatcher}},
	agentsv1alpha1.UpgradingReasonCheckpointing: {{events.TypePreHookDone, events.ConsumerPodCycler}, {events.TypeRedrivePreHookDone, events.ConsumerPodCycler}},
	agentsv1alpha1.UpgradingReasonUpgradePod:    {{events.TypePreHookDone, events.ConsumerPodCycler}, {events.TypeRedrivePreHookDone, events.ConsumerPodCycler}},
	agentsv1alpha1.UpgradingReasonPostUpgrade:   {{events.TypePodReady, events.ConsumerHookRunnerPost}, {events.TypeRedrivePodReady, events.ConsumerHookRunnerPost}},
}

// stageOutputs are, per stage, the events that end it: the next stage's input, or failed.
var stageOutputs = map[string][]string{
	agentsv1alpha1.UpgradingReasonPreUpgrade:    {events.TypePreHookDone, events.TypeFailed},
	agentsv1alpha1.UpgradingReasonCheckpointing: {events.TypePodReady, events.TypeFailed},
	agentsv1alpha1.UpgradingReasonUpgradePod:    {events.TypePodReady, events.TypeFailed},
	agentsv1alpha1.UpgradingReasonPostUpgrade:   {events.TypePostHookDone, events.TypeFailed},
}

// consumerState is what the watchdog needs of a consumer: stream sequences acknowledged (all
// up to ackFloor) and delivered (up to delivered), how many matching messages are not
// delivered yet (pending) or delivered and not acknowledged (ackPending), and when the
// watchdog last saw ackFloor or delivered move (moved): a consumer that neither takes nor
// finishes a message is not working through its queue.
type consumerState struct {
	ackFloor, delivered uint64
	pending             uint64
	ackPending          int
	moved               time.Time
	// floorMoved is when the watchdog last saw ackFloor move.
	floorMoved time.Time
	// lookedAt is when the watchdog asked.
	lookedAt time.Time
}

// Where a stage's input event is, for the watchdog.
const (
	inputHandled  = iota // acknowledged (or unknown): judge the stage as usual
	inputQueued          // not delivered yet, and its consumer works through its queue
	inputInFlight        // delivered to a handler, which has had it less than a deadline
)

// locate says where the input event at stream sequence seq is in consumer c at now.
// inFlightSince is when the watchdog first saw the event delivered and not acknowledged
// (zero: not seen so). limit is the stage's deadline: a queue that has not moved for that
// long is stuck, and is judged as usual, so nothing waits forever. A delivered event is
// allowed twice that: a service holds up to two events per worker, so one may wait for a
// handler of another sandbox to end before its own runs.
func locate(seq uint64, c consumerState, now, inFlightSince time.Time, limit time.Duration) int {
	switch {
	case seq <= c.ackFloor:
		return inputHandled
	case seq > c.delivered:
		if c.pending > 0 && now.Sub(c.moved) < limit {
			return inputQueued
		}
		return inputHandled
	case c.ackPending > 0 && (inFlightSince.IsZero() || now.Sub(inFlightSince) < 2*limit):
		return inputInFlight
	}
	return inputHandled
}

// queues looks up stage inputs in JetStream for the watchdog.
type queues struct {
	js  jetstream.JetStream
	now func() time.Time

	mu sync.Mutex
	// seen is, per consumer, the sequences last seen and when they moved.
	seen map[string]consumerState
	// inFlight is when an input event (by stream sequence) was first seen delivered and not
	// acknowledged.
	inFlight map[uint64]time.Time
}

func newQueues(js jetstream.JetStream, now func() time.Time) *queues {
	return &queues{js: js, now: now, seen: map[string]consumerState{}, inFlight: map[uint64]time.Time{}}
}

// queueLook is one watchdog check's view of the queues: the stream and each consumer are
// asked once per check, and only when a stage is past its deadline.
type queueLook struct {
	q         *queues
	stream    jetstream.Stream
	streamErr error
	consumers map[string]consumerState
	errs      map[string]error
	inFlight  map[uint64]time.Time // what this check saw in flight, for the next
	// broken is the first failed request of this look: the rest of the check asks nothing
	// more (each request could wait out the API timeout) and judges as usual.
	broken error
	// undelivered is true when the last waiting answer was an input not yet delivered
	// (inputQueued): the one wait that does not end by itself within a bound, which the
	// watchdog's give-up must not count.
	undelivered bool
	// undeliveredAt is the consumer that input waits at.
	undeliveredAt string
}

func (q *queues) look() *queueLook {
	return &queueLook{q: q, consumers: map[string]consumerState{}, errs: map[string]error{}, inFlight: map[uint64]time.Time{}}
}

// done keeps what this check saw in flight, so that events no longer in flight are
// forgotten.
func (l *queueLook) done() {
	l.q.mu.Lock()
	l.q.inFlight = l.inFlight
	l.q.mu.Unlock()
}

// waiting says whether an input event of stage for sb's attempt is still waiting at the
// consumer that handles it (see locate), or the stage's end was just reported (reported),
// and describes where for the log. An error (NATS unreachable, the stream or consumer
// gone) leaves the stage to be judged as usual.
func (l *queueLook) waiting(ctx context.Context, ns, name, attempt, stage string, limit time.Duration) (string, bool, error) {
	l.undelivered, l.undeliveredAt = false, ""
	if l.broken != nil {
		return "", false, l.broken
	}
	var errs []error
	for _, in := range stageInputs[stage] {
		where, ok, err := l.input(ctx, ns, name, attempt, in, limit)
		if ok {
			return where, true, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		where, ok, err := l.reported(ctx, ns, name, attempt, stage, limit)
		if ok {
			return where, true, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		l.broken = errors.Join(errs...)
	}
	return "", false, l.broken
}

// last returns the last message on sandbox ns/name's subject of eventType if it belongs
// to attempt; nil if there is none (never published, or lost with the stream) or it is an
// earlier attempt's.
func (l *queueLook) last(ctx context.Context, ns, name, eventType, attempt string) (*jetstream.RawStreamMsg, error) {
	tok, _ := events.TokenFor(eventType)
	subject := events.SandboxSubject(ns, name, tok)
	if l.stream == nil && l.streamErr == nil {
		l.stream, l.streamErr = l.q.js.Stream(ctx, events.StreamName)
	}
	if l.streamErr != nil {
		return nil, fmt.Errorf("look up stream %s: %w", events.StreamName, l.streamErr)
	}
	msg, err := l.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get the last message on %s: %w", subject, err)
	}
	if ev, err := events.Decode(msg.Data); err != nil || ev.Data.Attempt != attempt {
		return nil, nil
	}
	return msg, nil
}

// reported says whether the stage already reported its end (stageOutputs) for attempt,
// and statusagg has not applied it yet: less than limit ago, or at any age while
// statusagg's own consumer has not acknowledged it (statusagg is behind: failing the
// stage now would make the success that waits in its queue too late, final failures
// being final), as long as that consumer's ack floor moved within limit (one message
// held for ever must not hold every stage behind it). Without this, the moment between
// the two would be taken for a stall and re-driven. A report statusagg handled without
// acting on it is not waited for: the stage is judged as usual.
func (l *queueLook) reported(ctx context.Context, ns, name, attempt, stage string, limit time.Duration) (string, bool, error) {
	for _, out := range stageOutputs[stage] {
		msg, err := l.last(ctx, ns, name, out, attempt)
		if err != nil {
			return "", false, err
		}
		if msg == nil {
			continue
		}
		tok, _ := events.TokenFor(out)
		if l.q.now().Sub(msg.Time) < limit {
			return fmt.Sprintf("%s (stream sequence %d) was published at %s and is not applied yet", tok, msg.Sequence, msg.Time.UTC().Format(time.RFC3339)), true, nil
		}
		c, err := l.consumer(ctx, events.ConsumerStatusAgg)
		if err != nil {
			return "", false, err
		}
		if msg.Sequence > c.ackFloor && l.q.now().Sub(c.floorMoved) < limit {
			return fmt.Sprintf("%s (stream sequence %d) was published at %s and waits at statusagg's own consumer (acknowledged up to %d)", tok, msg.Sequence, msg.Time.UTC().Format(time.RFC3339), c.ackFloor), true, nil
		}
	}
	return "", false, nil
}

func (l *queueLook) input(ctx context.Context, ns, name, attempt string, in stageInput, limit time.Duration) (string, bool, error) {
	tok, _ := events.TokenFor(in.eventType)
	msg, err := l.last(ctx, ns, name, in.eventType, attempt)
	if err != nil || msg == nil {
		return "", false, err // none of this attempt: re-drive it
	}
	c, err := l.consumer(ctx, in.consumer)
	if err != nil {
		return "", false, err
	}
	now := l.q.now()
	l.q.mu.Lock()
	since := l.q.inFlight[msg.Sequence]
	l.q.mu.Unlock()
	switch locate(msg.Sequence, c, now, since, limit) {
	case inputQueued:
		l.undelivered, l.undeliveredAt = true, in.consumer
		return fmt.Sprintf("%s (stream sequence %d) waits at consumer %s, which has %d events not yet delivered", tok, msg.Sequence, in.consumer, c.pending), true, nil
	case inputInFlight:
		if since.IsZero() {
			since = now
		}
		l.inFlight[msg.Sequence] = since
		return fmt.Sprintf("%s (stream sequence %d) is being handled at consumer %s since %s", tok, msg.Sequence, in.consumer, since.Format(time.RFC3339)), true, nil
	}
	return "", false, nil
}

// consumer returns the state of consumer name, asked once per look, with when its
// sequences last moved as far as the watchdog saw.
func (l *queueLook) consumer(ctx context.Context, name string) (consumerState, error) {
	if c, ok := l.consumers[name]; ok {
		return c, l.errs[name]
	}
	var c consumerState
	cons, err := l.stream.Consumer(ctx, name)
	if err == nil {
		info := cons.CachedInfo()
		c = consumerState{ackFloor: info.AckFloor.Stream, delivered: info.Delivered.Stream, pending: info.NumPending, ackPending: info.NumAckPending}
		now := l.q.now()
		l.q.mu.Lock()
		prev, ok := l.q.seen[name]
		c.moved, c.floorMoved, c.lookedAt = prev.moved, prev.floorMoved, now
		if !ok || prev.ackFloor != c.ackFloor || prev.delivered != c.delivered {
			c.moved = movedAt(now, prev, ok, info.Delivered.Last, info.AckFloor.Last)
		}
		if !ok || prev.ackFloor != c.ackFloor {
			c.floorMoved = movedAt(now, prev, ok, info.AckFloor.Last)
		}
		l.q.seen[name] = c
		l.q.mu.Unlock()
	} else {
		err = fmt.Errorf("look up consumer %s: %w", name, err)
	}
	l.consumers[name], l.errs[name] = c, err
	return c, err
}

// movedAt is when a consumer's sequences moved, seen changed at now (or seen for the
// first time: ok false; prev is the look before): the latest of the server's times
// of its last activity (a delivery, an acknowledgement), between the look before and
// now. Without them, now. A consumer whose service died before the watchdog first
// looked at it (no earlier look in this process) is then not given a whole deadline
// more, from that first look, to move again.
func movedAt(now time.Time, prev consumerState, ok bool, lastActive ...*time.Time) time.Time {
	var at time.Time
	for _, t := range lastActive {
		if t != nil && t.After(at) {
			at = *t
		}
	}
	switch {
	case at.IsZero() || at.After(now):
		return now
	case ok && at.Before(prev.lookedAt):
		// It moved since the look before, whatever the server's clock says.
		return prev.lookedAt
	}
	return at
}
