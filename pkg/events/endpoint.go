package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// Endpoint is a service's attachment to the event stream: the stream and its
// durable consumer (unless ConsumerConfig.PublishOnly) exist, and Publisher and
// Metrics are ready. Open is the one way a service attaches.
type Endpoint struct {
	Publisher *Publisher
	Metrics   *Metrics

	js       jetstream.JetStream
	name     string
	stream   StreamConfig
	consumer ConsumerConfig
	cons     jetstream.Consumer // as attached by Open; Consume keeps its own after a re-attach
}

// Pauses between attempts to re-attach a deleted consumer: the first, then doubling while
// attempts fail, up to the last.
const (
	reattachPause    = time.Second
	reattachMaxPause = 30 * time.Second
)

// ErrUnusable marks a stream or consumer config that no retry can make work
// (an invalid config, a stream that cannot carry molt's events): Open
// returns it at once; any other failure to attach is retried.
var ErrUnusable = errors.New("unusable stream or consumer config")

// Open registers the event metrics on reg and ensures the stream and the
// service's durable consumer (name is one of the Consumer constants; with
// consumer.PublishOnly, any service name, and no consumer), reporting config
// drift on the metrics (EnsureStream, EnsureConsumer). The Publisher's events
// carry name as their source.
func Open(ctx context.Context, js jetstream.JetStream, reg prometheus.Registerer, name string, stream StreamConfig, consumer ConsumerConfig) (*Endpoint, error) {
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register event metrics for %s: %w", name, err)
	}
	stream.Metrics, consumer.Metrics = m, m
	e := &Endpoint{Metrics: m, js: js, name: name, stream: stream, consumer: consumer}
	if err := e.connect(ctx); err != nil {
		return nil, err
	}
	if e.Publisher, err = NewPublisher(js, name, m); err != nil {
		return nil, err
	}
	return e, nil
}

// OpenConsumer attaches one more durable consumer of the same service (name is one of the
// Consumer constants), as Open does, sharing e's Publisher (its events keep e's source) and
// Metrics. A service reads events of different urgency through separate consumers, so that
// one kind never queues behind the other (hookrunner: postUpgrade behind preUpgrade).
func (e *Endpoint) OpenConsumer(ctx context.Context, name string, consumer ConsumerConfig) (*Endpoint, error) {
	if consumer.PublishOnly {
		return nil, fmt.Errorf("open consumer %s: %w: PublishOnly opens no consumer", name, ErrUnusable)
	}
	consumer.Metrics = e.Metrics
	o := &Endpoint{Publisher: e.Publisher, Metrics: e.Metrics, js: e.js, name: name, stream: e.stream, consumer: consumer}
	if err := o.connect(ctx); err != nil {
		return nil, err
	}
	return o, nil
}

// connect attaches, retrying until ctx ends while JetStream does not answer.
func (e *Endpoint) connect(ctx context.Context) error {
	var err error
	if e.cons, err = e.attach(ctx); err != nil {
		if errors.Is(err, ErrUnusable) {
			return err
		}
		// JetStream may not answer yet (a cluster electing its leader, NATS
		// starting): keep trying, as after a deleted stream, rather than exit.
		logger := klog.FromContext(ctx).WithValues("consumer", e.name)
		logger.Error(err, "Cannot attach to the event stream yet; retrying", "pause", reattachPause)
		var ok bool
		if e.cons, _, ok = e.reattach(ctx, logger, reattachPause); !ok {
			return fmt.Errorf("attach to stream %s as %s: %w (stopped retrying: %v)", StreamName, e.name, err, ctx.Err())
		}
	}
	return nil
}

// attach ensures the stream, then the consumer, with the config Open was given. An error
// says what the NATS connection last reported when that explains it (withConnError): a
// refused login or subject otherwise shows only as a timeout.
func (e *Endpoint) attach(ctx context.Context) (jetstream.Consumer, error) {
	if _, err := EnsureStream(ctx, e.js, e.stream); err != nil {
		return nil, withConnError(e.js, err)
	}
	if e.consumer.PublishOnly {
		return nil, nil
	}
	c, err := EnsureConsumer(ctx, e.js, e.name, e.consumer)
	return c, withConnError(e.js, err)
}

// Consume runs Consume on the endpoint's consumer, with its metrics, until ctx is cancelled,
// and returns what Consume returns, with one exception: when the consumer or the stream is
// deleted, it does not return but re-attaches and consumes again. Re-attaching ensures the
// stream and the consumer as Open did (so they are created anew, the consumer replaying at
// most its ReplayWindow); it pauses 1s before the first attempt and twice as long before each
// next one, up to 30s, and logs every attempt.
func (e *Endpoint) Consume(ctx context.Context, h Handler, opts ...ConsumeOption) error {
	if e.consumer.PublishOnly {
		return fmt.Errorf("consume as %s: the endpoint was opened PublishOnly, with no consumer", e.name)
	}
	logger := klog.FromContext(ctx).WithValues("consumer", e.name)
	opts = append([]ConsumeOption{WithMetrics(e.Metrics)}, opts...)
	backlogDone := make(chan struct{})
	defer func() { <-backlogDone }()
	go func() { defer close(backlogDone); e.watchBacklog(ctx) }()
	cons, pause := e.cons, reattachPause
	for {
		started := time.Now()
		err := Consume(ctx, cons, h, opts...)
		switch {
		case err == nil || !consumerGone(err):
			return err
		case ctx.Err() != nil:
			return nil
		}
		if time.Since(started) > reattachMaxPause { // it had been consuming: not flapping
			pause = reattachPause
		}
		logger.Info("Consumer or stream deleted; re-attaching", "err", err, "pause", pause)
		var ok bool
		if cons, pause, ok = e.reattach(ctx, logger, pause); !ok {
			return nil
		}
	}
}

// reattach attaches again, pausing before each attempt, the first pause long, doubling up
// to reattachMaxPause. It returns the consumer and the next pause, or false once ctx is done.
func (e *Endpoint) reattach(ctx context.Context, logger klog.Logger, pause time.Duration) (jetstream.Consumer, time.Duration, bool) {
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, pause, false
		case <-t.C:
		}
		pause = min(2*pause, reattachMaxPause)
		cons, err := e.attach(ctx)
		if err == nil {
			logger.Info("Re-attached", "attempt", attempt)
			return cons, pause, true
		}
		logger.Error(err, "Re-attach failed, retrying", "attempt", attempt, "pause", pause)
	}
}

// backlogEvery is how often Consume reads its consumer's backlog for
// molt_events_consumer_pending.
const backlogEvery = 15 * time.Second

// watchBacklog reads the consumer's info every backlogEvery until ctx ends
// and records its pending and ack-pending counts. A failed read (the
// consumer re-attaching) is skipped.
func (e *Endpoint) watchBacklog(ctx context.Context) {
	t := time.NewTicker(backlogEvery)
	defer t.Stop()
	for {
		infoCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if c, err := e.js.Consumer(infoCtx, StreamName, e.name); err == nil {
			info := c.CachedInfo()
			e.Metrics.recordBacklog(e.name, info.NumPending, info.NumAckPending)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
