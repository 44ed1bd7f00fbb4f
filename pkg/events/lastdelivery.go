package events

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"k8s.io/klog/v2"
)

// StageFailure names where a stage files a failure: the Upgrading stage and its failed
// reason (for example UpgradePod and UpgradePodFailed).
type StageFailure struct {
	Stage, Reason string
}

// stageError is an error a handler raised in a stage other than the one its
// event's failure is filed under by default (AtStage).
type stageError struct {
	f   StageFailure
	err error
}

func (e *stageError) Error() string { return e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

// AtStage marks err as raised in stage f: on the last delivery,
// FailOnLastDelivery files it there instead of under the event's default
// stage (podcycler's Checkpointing, before UpgradePod touched anything).
func AtStage(f StageFailure, err error) error {
	if err == nil {
		return nil
	}
	return &stageError{f: f, err: err}
}

// FailOnLastDelivery wraps h so that a message h cannot handle on its last allowed delivery
// ends the sandbox's attempt visibly instead of being terminated silently: it publishes
// TypeFailed for the message's sandbox and attempt, in the stage failureOf names, with a
// message saying what could not be done and how often it was tried, and then acks.
// failureOf returns ok=false for events whose failure is not this stage's to report; their
// errors pass through unchanged. An error marked AtStage is filed in its own stage. A handler error wrapping context.Canceled (shutdown) also
// passes through: the message is redelivered to another replica.
//
// When publishing the failure fails too, both errors are returned and the message is
// terminated by Consume; the watchdog (rule 10) then fails the stalled attempt from the
// state in Kubernetes.
func FailOnLastDelivery(pub *Publisher, failureOf func(Event) (StageFailure, bool), h Handler) Handler {
	return func(ctx context.Context, msg *Message) error {
		err := recovered(ctx, h, msg)
		if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, ErrPermanent) || !msg.LastDelivery() {
			return err
		}
		f, ok := failureOf(msg.Event)
		if !ok {
			return err
		}
		if at := (*stageError)(nil); errors.As(err, &at) {
			f = at.f
		}
		out := Event{Type: TypeFailed, Data: msg.Event.Data}
		out.Data.Stage, out.Data.Reason = f.Stage, f.Reason
		out.Data.Message = fmt.Sprintf("%s gave up on %s after %d deliveries: %v; nothing more was done after that error, and what this stage did before it stays (a backup already made is kept): fix the cause, then create a new SandboxUpdateOps to resume it",
			pub.source, msg.Event.Type, msg.NumDelivered, err)
		if perr := pub.Publish(ctx, out); perr != nil {
			return errors.Join(err, fmt.Errorf("report the failure of %s: %w", msg.Event.SandboxKey(), perr))
		}
		klog.FromContext(ctx).Info("Gave up on the last delivery; reported the sandbox as failed", "reason", f.Reason, "err", err)
		return nil
	}
}

// recovered runs h, turning a panic into a plain error (as Consume does), so that a
// handler that panics on its last delivery fails its stage like one that returns an
// error, instead of leaving it to the watchdog's deadline.
func recovered(ctx context.Context, h Handler, msg *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			klog.FromContext(ctx).Error(nil, "Handler panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return h(ctx, msg)
}
