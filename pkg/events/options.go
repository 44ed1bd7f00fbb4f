package events

import (
	"context"
	"time"
)

// ConsumeOption tunes Consume.
type ConsumeOption func(*consumeOptions)

type consumeOptions struct {
	workers        int
	metrics        *Metrics
	retry          retryPolicy
	progress       time.Duration
	pullWait       time.Duration
	errorPause     time.Duration
	handlerTimeout time.Duration
	onTerminated   func(context.Context, Terminated)
}

// WithWorkers bounds concurrency (default 4): at most n handlers run at once, each on a
// different subject (sandbox and event type), and at most 2n messages are held (running or
// waiting behind an earlier message of their subject).
func WithWorkers(n int) ConsumeOption { return func(o *consumeOptions) { o.workers = n } }

// WithMetrics records handled events and handler durations on m.
func WithMetrics(m *Metrics) ConsumeOption { return func(o *consumeOptions) { o.metrics = m } }

// WithRetryBackoff sets the Nak delay of plain errors: minDelay·2^(NumDelivered−1), capped at
// maxDelay. Default 1s to 1m.
func WithRetryBackoff(minDelay, maxDelay time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.retry = retryPolicy{min: minDelay, max: maxDelay} }
}

// WithProgressInterval sets how often held messages are marked InProgress. Default: the
// consumer's AckWait/3.
func WithProgressInterval(d time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.progress = d }
}

// WithPullWait sets how long one pull request waits for messages (default 5s). Stopping
// waits for the outstanding pull request to end (at most the pull wait plus a second after
// it was sent), so this also bounds the shutdown delay.
func WithPullWait(d time.Duration) ConsumeOption { return func(o *consumeOptions) { o.pullWait = d } }

// WithHandlerTimeout bounds each handler call with a context deadline (default: none; a
// stage's own deadline normally bounds it).
func WithHandlerTimeout(d time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.handlerTimeout = d }
}

// OnTerminated registers fn to be called, after the Term, for every message Consume
// terminates. fn runs on the worker; keep it short.
func OnTerminated(fn func(context.Context, Terminated)) ConsumeOption {
	return func(o *consumeOptions) { o.onTerminated = fn }
}
