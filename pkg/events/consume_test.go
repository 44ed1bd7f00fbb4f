package events

import (
	"context"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

func TestConsumeRejectsBadOptions(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, ctx, ConsumerPatcher, ConsumerConfig{AckWait: time.Second})
	noop := func(context.Context, *Message) error { return nil }
	tests := []struct {
		name string
		opts []ConsumeOption
	}{
		{"no workers", []ConsumeOption{WithWorkers(0)}},
		{"zero retry backoff", []ConsumeOption{WithRetryBackoff(0, time.Second)}},
		{"max below min", []ConsumeOption{WithRetryBackoff(time.Second, time.Millisecond)}},
		{"progress not below ack wait", []ConsumeOption{WithProgressInterval(time.Second)}},
		{"tiny pull wait", []ConsumeOption{WithPullWait(time.Millisecond)}},
		{"negative handler timeout", []ConsumeOption{WithHandlerTimeout(-time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Consume(ctx, f.cons, noop, tt.opts...); err == nil {
				t.Fatal("want error")
			}
		})
	}
	if err := Consume(ctx, nil, noop); err == nil {
		t.Error("nil consumer: want error")
	}
}

// TestConsumeReturnsWhenConsumerDeletedBetweenPulls: a consumer deleted while no pull request
// of Consume is outstanding (every slot held by a running or waiting message) is noticed at
// the next pull, which nobody answers, and Consume returns an error saying it is gone.
func TestConsumeReturnsWhenConsumerDeletedBetweenPulls(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, ctx, ConsumerStatusAgg, ConsumerConfig{})
	f.publish(t, ctx, testEvent(TypeRequested, "team-a", "sbx-1", 0), testEvent(TypeRequested, "team-a", "sbx-2", 0))
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, f.cons, func(context.Context, *Message) error { <-release; return nil },
			WithWorkers(1), WithPullWait(500*time.Millisecond)) // two slots, both taken
	}()
	eventually(t, "both messages to be held and no pull request to wait", func() bool {
		info := consumerInfo(t, ctx, f.cons)
		return info.NumAckPending == 2 && info.NumWaiting == 0
	})
	if err := f.js.DeleteConsumer(ctx, StreamName, ConsumerStatusAgg); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case err := <-done:
		if !consumerGone(err) {
			t.Fatalf("Consume = %v, want an error saying the consumer is gone", err)
		}
	case <-time.After(pollTimeout):
		t.Fatalf("Consume still running %s after its consumer was deleted", pollTimeout)
	}
}
