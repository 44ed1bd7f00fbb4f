package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// RequestHandled returns the type of an event of attempt for sandbox ns/name
// that the stream holds and that a stage publishes only once it has handled
// the attempt's `requested` (patched, failed); "" when it holds none (never
// published, an earlier attempt's, or lost with the stream). A `requested`
// sent again to recover one that was lost must not be sent for an attempt
// that already went on: while statusagg is down nothing on the sandbox shows
// how the attempt ended, and a request stored again once the duplicate
// window has passed would run its stages again (a preUpgrade that failed
// run again, and the pod replaced, behind the recorded failure).
//
// It reads the last message on each subject (a direct get on a stream that
// allows them): the user needs $JS.API.STREAM.MSG.GET.MOLT_EVENTS and
// $JS.API.DIRECT.GET.MOLT_EVENTS.>.
func (p *Publisher) RequestHandled(ctx context.Context, ns, name, attempt string) (string, error) {
	stream, err := p.js.Stream(ctx, StreamName)
	if err != nil {
		return "", fmt.Errorf("look up stream %s: %w", StreamName, withConnError(p.js, err))
	}
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
		if ev, err := Decode(msg.Data); err == nil && ev.Data.Attempt == attempt {
			return t, nil
		}
	}
	return "", nil
}
