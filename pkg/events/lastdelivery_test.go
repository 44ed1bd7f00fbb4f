package events

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// On its last delivery, a handler's error becomes a failed event in the
// stage its event files failures under, unless the error says it was raised
// in another stage (AtStage): podcycler's checkpoint errors are the
// checkpoint's failure, not UpgradePod's.
func TestFailOnLastDeliveryFilesInTheErrorsStage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name       string
		err        error
		panics     bool // the handler panics with err's text instead of returning it
		wantStage  string
		wantReason string
	}{
		{"default stage", errors.New("create pod: the server is gone"), false, "UpgradePod", "UpgradePodFailed"},
		{"marked stage", AtStage(StageFailure{Stage: "Checkpointing", Reason: "CheckpointFailed"}, errors.New("get checkpoint: forbidden")), false, "Checkpointing", "CheckpointFailed"},
		// A panic on the last delivery fails the stage as an error does, not
		// only at the watchdog's deadline.
		{"a panic", errors.New("nil map"), true, "UpgradePod", "UpgradePodFailed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, ctx, ConsumerPodCycler, ConsumerConfig{MaxDeliver: 1, AckWait: 5 * time.Second})
			ev := testEvent(TypePreHookDone, "ns", "sbx-"+strings.ReplaceAll(tc.name, " ", "-"), 1)
			failureOf := func(Event) (StageFailure, bool) {
				return StageFailure{Stage: "UpgradePod", Reason: "UpgradePodFailed"}, true
			}
			f.consume(t, ctx, FailOnLastDelivery(f.pub, failureOf, func(context.Context, *Message) error {
				if tc.panics {
					panic(tc.err.Error())
				}
				return tc.err
			}))
			f.publish(t, ctx, ev)

			stream, err := f.js.Stream(ctx, StreamName)
			if err != nil {
				t.Fatal(err)
			}
			subject := SandboxSubject("ns", ev.Data.Sandbox.Name, TokenFailed)
			var failed Event
			eventually(t, "the failed event", func() bool {
				msg, err := stream.GetLastMsgForSubject(ctx, subject)
				if err != nil {
					return false
				}
				failed, err = Decode(msg.Data)
				return err == nil
			})
			if failed.Data.Stage != tc.wantStage || failed.Data.Reason != tc.wantReason {
				t.Errorf("failed in %s/%s, want %s/%s", failed.Data.Stage, failed.Data.Reason, tc.wantStage, tc.wantReason)
			}
			if !strings.Contains(failed.Data.Message, tc.err.Error()) {
				t.Errorf("message %q lacks the error %q", failed.Data.Message, tc.err)
			}
		})
	}
}
