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
	stream, err := p.js.Stream(ctx, StreamName)
	if err != nil {
		return "", fmt.Errorf("look up stream %s: %w", StreamName, withConnError(p.js, err))
	}
	var ackFloor *uint64
	for _, t := range []string{TypePatched, TypeFailed} {
		tok, _ := TokenFor(t)
		subject := SandboxSubject(ns, name, tok)
		msg, err := stream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("get the last message on %s: %w", subject, withConnError(p.js, err))
		}
		if ev, err := Decode(msg.Data); err != nil || ev.Data.Attempt != attempt || ev.Data.Sandbox.UID != uid {
			continue
		}
		if ackFloor == nil {
			floor, err := consumedUpTo(ctx, stream)
			if err != nil {
				return "", err
			}
			ackFloor = &floor
		}
		if msg.Sequence > *ackFloor {
			return t, nil
		}
	}
	return "", nil
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
