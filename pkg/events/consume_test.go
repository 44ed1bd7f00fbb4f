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
