package events

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	p := retryPolicy{min: time.Second, max: 10 * time.Second}
	plain := errors.New("apiserver unavailable")
	tests := []struct {
		name         string
		err          error
		numDelivered uint64
		maxDeliver   int
		want         action
	}{
		{"success", nil, 1, 5, action{kind: actAck, result: resultAck}},
		{"success on last delivery", nil, 5, 5, action{kind: actAck, result: resultAck}},
		{"plain error first delivery", plain, 1, 5, action{kind: actNak, delay: time.Second, result: resultRetry}},
		{"plain error backs off", plain, 3, 5, action{kind: actNak, delay: 4 * time.Second, result: resultRetry}},
		{"plain error backoff capped", plain, 9, -1, action{kind: actNak, delay: 10 * time.Second, result: resultRetry}},
		{"plain error on last delivery", plain, 5, 5, action{kind: actTerm, result: resultExhausted}},
		{"plain error unlimited deliveries", plain, 500, -1, action{kind: actNak, delay: 10 * time.Second, result: resultRetry}},
		{"retry with delay", Retry(plain, 3*time.Second), 1, 5, action{kind: actNak, delay: 3 * time.Second, result: resultRetry}},
		{"wrapped retry", fmt.Errorf("wait pod: %w", Retry(plain, time.Minute)), 2, 5, action{kind: actNak, delay: time.Minute, result: resultRetry}},
		{"retry on last delivery", Retry(plain, time.Second), 5, 5, action{kind: actTerm, result: resultExhausted}},
		{"permanent", Permanent(plain), 1, 5, action{kind: actTerm, result: resultPermanent}},
		{"wrapped permanent", fmt.Errorf("patch: %w", Permanent(plain)), 1, 5, action{kind: actTerm, result: resultPermanent}},
		{"permanent nil", Permanent(nil), 1, 5, action{kind: actTerm, result: resultPermanent}},
		{"poison", fmt.Errorf("%w: bad json", ErrUndecodable), 1, 5, action{kind: actTerm, result: resultPoison}},
		{"shutdown", fmt.Errorf("run hook: %w", context.Canceled), 2, 5, action{kind: actNak, result: resultRetry}},
		{"shutdown on last delivery is not a failure", context.Canceled, 5, 5, action{kind: actNak, result: resultRetry}},
		{"deadline is a plain error", context.DeadlineExceeded, 1, 5, action{kind: actNak, delay: time.Second, result: resultRetry}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.err, tt.numDelivered, tt.maxDeliver, p); got != tt.want {
				t.Fatalf("classify(%v, %d, %d) = %+v, want %+v", tt.err, tt.numDelivered, tt.maxDeliver, got, tt.want)
			}
		})
	}
}

func TestErrorWrappers(t *testing.T) {
	base := errors.New("boom")
	if err := Permanent(base); !errors.Is(err, ErrPermanent) || !errors.Is(err, base) || err.Error() != "boom" {
		t.Errorf("Permanent(base) = %v: want Is ErrPermanent and base", err)
	}
	if err := Retry(base, time.Second); errors.Is(err, ErrPermanent) || !errors.Is(err, base) {
		t.Errorf("Retry(base) = %v: want Is base, not ErrPermanent", err)
	}
	if Retry(nil, time.Second) == nil {
		t.Errorf("Retry(nil) must still be an error, or the message would be acked")
	}
}

func TestWireNakDelay(t *testing.T) {
	s := time.Second
	backoff := []time.Duration{s, 2 * s, 4 * s}
	tests := []struct {
		name         string
		want         time.Duration
		numDelivered uint64
		backoff      []time.Duration
		wire         time.Duration
	}{
		{"no backoff", 3 * s, 2, nil, 3 * s},
		{"nak now", 0, 2, backoff, 0},
		{"first delivery: no gap", 3 * s, 1, backoff, 3 * s},
		{"second delivery: gap 1s", 3 * s, 2, backoff, 2 * s},
		{"beyond backoff uses last step", 5 * s, 9, backoff, 2 * s},
		{"delay shorter than gap", s / 2, 3, backoff, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wireNakDelay(tt.want, tt.numDelivered, s, tt.backoff); got != tt.wire {
				t.Fatalf("wireNakDelay(%s, %d) = %s, want %s", tt.want, tt.numDelivered, got, tt.wire)
			}
		})
	}
}
