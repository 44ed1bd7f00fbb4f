package events

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrPermanent marks an error that no redelivery can fix. Match it with errors.Is; create it
// with Permanent.
var ErrPermanent = errors.New("permanent failure")

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

// Permanent marks err as permanent: Consume terminates the message (Term) instead of asking
// for a redelivery, and reports it as dead. A handler returns it for input it can never act
// on; a stage that fails for the user publishes TypeFailed and returns nil instead.
func Permanent(err error) error {
	if err == nil {
		return ErrPermanent
	}
	return &permanentError{err: err}
}

type retryError struct {
	err   error
	delay time.Duration
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// Retry asks Consume to redeliver the message after delay (NakWithDelay) instead of the
// backoff it would choose for a plain error; use it when the handler knows when to look
// again (a pod not yet Ready, a lease held elsewhere).
func Retry(err error, delay time.Duration) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryError{err: err, delay: delay}
}

// actionKind is what Consume does with a handled message.
type actionKind int

const (
	actAck  actionKind = iota // Ack
	actNak                    // NakWithDelay(action.delay)
	actTerm                   // Term, and report as dead
)

// Result label values of molt_events_handled_total, one per way a message leaves Consume.
const (
	resultAck       = "ack"       // handler succeeded
	resultRetry     = "retry"     // Nak: redelivered later
	resultPermanent = "permanent" // Term: handler returned Permanent
	resultPoison    = "poison"    // Term: message undecodable
	resultExhausted = "exhausted" // Term: failed on its last allowed delivery
)

type action struct {
	kind   actionKind
	delay  time.Duration // for actNak
	result string        // metric label, and Term reason
}

// retryPolicy spaces Naks of plain errors: min·2^(n-1), capped at max, n = deliveries so far.
type retryPolicy struct {
	min, max time.Duration
}

func (p retryPolicy) delay(numDelivered uint64) time.Duration {
	d := p.min
	for i := uint64(1); i < numDelivered && d < p.max; i++ {
		d *= 2
	}
	return min(d, p.max)
}

// classify decides what happens to a message after its handler returned err, on delivery
// numDelivered (1-based) of at most maxDeliver (-1 or 0: unlimited). In order:
//
//   - nil → Ack.
//   - ErrUndecodable → Term (poison): a redelivery would be just as unreadable.
//   - ErrPermanent → Term.
//   - context.Canceled (the consume loop is stopping) → Nak now: not a failure, and
//     another replica may take it at once. (On the last allowed delivery the server will
//     not deliver it again; the stage's deadline then reports it, rule 4.)
//   - anything else on the last allowed delivery → Term (exhausted): a Nak would leave it
//     stranded unnoticed, a Term is reported.
//   - Retry(err, d) → Nak after d.
//   - any other error → Nak after p.delay(numDelivered).
func classify(err error, numDelivered uint64, maxDeliver int, p retryPolicy) action {
	var re *retryError
	switch {
	case err == nil:
		return action{kind: actAck, result: resultAck}
	case errors.Is(err, ErrUndecodable):
		return action{kind: actTerm, result: resultPoison}
	case errors.Is(err, ErrPermanent):
		return action{kind: actTerm, result: resultPermanent}
	case errors.Is(err, context.Canceled):
		return action{kind: actNak, result: resultRetry}
	case maxDeliver > 0 && numDelivered >= uint64(maxDeliver):
		return action{kind: actTerm, result: resultExhausted}
	case errors.As(err, &re):
		return action{kind: actNak, delay: max(re.delay, 0), result: resultRetry}
	default:
		return action{kind: actNak, delay: p.delay(numDelivered), result: resultRetry}
	}
}

// termReason is sent with Term so the server's MSG_TERMINATED advisory says why.
func termReason(a action, err error) string {
	return fmt.Sprintf("%s: %v", a.result, err)
}

// wireNakDelay turns the delay classify chose into the argument of NakWithDelay. The server
// schedules a delayed Nak at now−AckWait+delay and then waits BackOff[redeliveries] (not
// AckWait) when the consumer has BackOff, which adds BackOff[i]−AckWait to every delay; this
// subtracts it again. The message comes back no sooner than want, and no later than the
// consumer's BackOff step. 0 means Nak now.
func wireNakDelay(want time.Duration, numDelivered uint64, ackWait time.Duration, backoff []time.Duration) time.Duration {
	if want <= 0 || len(backoff) == 0 {
		return max(want, 0)
	}
	i := len(backoff) - 1
	if numDelivered >= 1 && numDelivered-1 < uint64(i) {
		i = int(numDelivered - 1)
	}
	gap := backoff[i] - ackWait
	if gap <= 0 {
		return want
	}
	return max(want-gap, time.Millisecond)
}
