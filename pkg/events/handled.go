package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/types"
)

// RequestHandled returns the type of an event of attempt for the sandbox
// ns/name of uid that the stream holds, that a stage publishes only once it
// has handled the attempt's `requested` (patched, failed), and that
// statusagg has not consumed yet; "" when there is none (never published, an
// earlier attempt's or an earlier sandbox's of the name, lost with the
// stream, or consumed by statusagg already).
//
// A `requested` sent again to recover one that was lost must not be sent for
// an attempt that already went on while statusagg is down or behind: nothing
// on the sandbox shows how the attempt ended yet, and a request stored again
// once the duplicate window has passed would run its stages again (a
// preUpgrade that failed run again, and the pod replaced, behind the failure
// statusagg records later). Once statusagg has consumed the event and the
// status still does not show the attempt, statusagg dropped it (it gave up
// on it), and the request is what recovers the attempt.
//
// It reads the last message on each subject (a direct get on a stream that
// allows them) and the statusagg consumer's ack floor: the user needs
// $JS.API.STREAM.MSG.GET.MOLT_EVENTS, $JS.API.DIRECT.GET.MOLT_EVENTS.> and
// $JS.API.CONSUMER.INFO.MOLT_EVENTS.statusagg.
func (p *Publisher) RequestHandled(ctx context.Context, ns, name string, uid types.UID, attempt string) (string, error) {
	l, err := p.newLastReader(ctx)
	if err != nil {
		return "", err
	}
	for _, t := range []string{TypePatched, TypeFailed} {
		switch ev, err := l.unconsumed(ctx, ns, name, uid, t); {
		case err != nil:
			return "", err
		case ev != nil && ev.Data.Attempt == attempt:
			return t, nil
		}
	}
	return "", nil
}

// UnconsumedRequest returns the attempt of the last `requested` for the
// sandbox ns/name of uid that statusagg has not consumed yet ("" when there
// is none): an attempt asked for that the sandbox's status cannot show yet.
// The selector holds back a second direct attempt while one is (two
// backups at once, a pod replaced under the other's hook), also after a
// restart that lost its memory of what it requested. Same permissions as
// RequestHandled.
func (p *Publisher) UnconsumedRequest(ctx context.Context, ns, name string, uid types.UID) (string, error) {
	l, err := p.newLastReader(ctx)
	if err != nil {
		return "", err
	}
	ev, err := l.unconsumed(ctx, ns, name, uid, TypeRequested)
	if err != nil || ev == nil {
		return "", err
	}
	return ev.Data.Attempt, nil
}

// lastReader reads the last message of a type on a sandbox's subject, and
// whether statusagg's consumer has acknowledged it.
type lastReader struct {
	js       jetstream.JetStream
	stream   jetstream.Stream
	ackFloor *uint64 // read once, when first needed
}

func (p *Publisher) newLastReader(ctx context.Context) (*lastReader, error) {
	stream, err := p.js.Stream(ctx, StreamName)
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", StreamName, withConnError(p.js, err))
	}
	return &lastReader{js: p.js, stream: stream}, nil
}

// LastEvent returns the last event of type t on the subject of the sandbox
// ns/name, when it is of the sandbox of uid; nil when there is none (never
// published, an earlier sandbox's of the name, lost with the stream). The
// user needs $JS.API.STREAM.MSG.GET.MOLT_EVENTS and
// $JS.API.DIRECT.GET.MOLT_EVENTS.>.
func (p *Publisher) LastEvent(ctx context.Context, ns, name string, uid types.UID, t string) (*Event, error) {
	l, err := p.newLastReader(ctx)
	if err != nil {
		return nil, err
	}
	ev, _, err := l.last(ctx, ns, name, uid, t)
	return ev, err
}

// last returns the last event of type t on the subject of the sandbox
// ns/name and its stream sequence, when it is of the sandbox of uid; nil
// otherwise (none, an earlier sandbox's of the name, unreadable).
func (l *lastReader) last(ctx context.Context, ns, name string, uid types.UID, t string) (*Event, uint64, error) {
	tok, _ := TokenFor(t)
	subject := SandboxSubject(ns, name, tok)
	msg, err := l.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get the last message on %s: %w", subject, withConnError(l.js, err))
	}
	ev, err := Decode(msg.Data)
	if err != nil || ev.Data.Sandbox.UID != uid {
		return nil, 0, nil
	}
	return &ev, msg.Sequence, nil
}

// unconsumed returns the last event of type t on the subject of the sandbox
// ns/name, when it is of the sandbox of uid and beyond statusagg's ack
// floor; nil otherwise (none, an earlier sandbox's of the name, unreadable,
// or consumed).
func (l *lastReader) unconsumed(ctx context.Context, ns, name string, uid types.UID, t string) (*Event, error) {
	ev, seq, err := l.last(ctx, ns, name, uid, t)
	if err != nil || ev == nil {
		return nil, err
	}
	if l.ackFloor == nil {
		floor, err := consumedUpTo(ctx, l.stream)
		if err != nil {
			return nil, err
		}
		l.ackFloor = &floor
	}
	if seq <= *l.ackFloor {
		return nil, nil
	}
	return ev, nil
}

// consumedUpTo is the stream sequence up to which statusagg's consumer has
// acknowledged (or given up on) every message; 0 when the consumer does not
// exist yet (statusagg, once it creates it, reads the stream from its start).
func consumedUpTo(ctx context.Context, stream jetstream.Stream) (uint64, error) {
	cons, err := stream.Consumer(ctx, ConsumerStatusAgg)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up consumer %s: %w", ConsumerStatusAgg, err)
	}
	return cons.CachedInfo().AckFloor.Stream, nil
}
