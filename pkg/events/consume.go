package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/klog/v2"
)

// Handler handles one event. What its return value does to the message:
//
//   - nil: Ack. Return nil only after the side effect and any outgoing event are done.
//   - Retry(err, d): NakWithDelay — redelivered after d.
//   - any other error: NakWithDelay with a backoff that grows with NumDelivered.
//   - Permanent(err): Term — never redelivered; reported like a poison message.
//   - any error on the message's last allowed delivery (Message.LastDelivery): Term,
//     reported as exhausted. A stage that can fail for the user publishes TypeFailed on its
//     last delivery and returns nil.
//
// A handler that panics is treated as returning a plain error. A message that cannot be
// decoded (poison) never reaches the handler: it is terminated and reported.
//
// ctx carries a logger with the keys sandbox, ops, stage, attempt, seq. It is cancelled
// shortly after Consume's ctx (once the outstanding pull request has ended, see Consume);
// a handler should then return promptly with an error wrapping context.Canceled, and the
// message is Nak'd at once for another replica, without counting as a failure.
type Handler func(ctx context.Context, msg *Message) error

// Message is one delivery of one event.
type Message struct {
	Event        Event
	Subject      string
	Seq          uint64 // stream sequence: `nats stream get MOLT_EVENTS <Seq>`
	NumDelivered uint64 // 1 on first delivery
	maxDeliver   int
	h            *held
}

// InProgress resets the server's redelivery timer. Consume already does this every
// AckWait/3 while the handler runs; a handler may call it after a long step of its own.
func (m *Message) InProgress() error { return m.h.inProgress() }

// LastDelivery reports whether an error now would terminate the message instead of asking
// for another delivery.
func (m *Message) LastDelivery() bool {
	return m.maxDeliver > 0 && m.NumDelivered >= uint64(m.maxDeliver)
}

// Terminated describes a message Consume terminated (Term): poison, Permanent, or exhausted.
// The message itself stays in the stream (limits retention) for inspection with
// `nats stream get MOLT_EVENTS <Seq>`; the server also publishes a MSG_TERMINATED advisory
// carrying Reason.
type Terminated struct {
	Consumer     string
	Subject      string
	Seq          uint64
	NumDelivered uint64
	Reason       string // poison, permanent or exhausted
	Err          error
	Event        *Event // nil for a poison message
	Body         []byte
}

// Consume pulls messages from cons and hands each to handler until ctx is cancelled, then
// returns nil once every handler has finished and every message it received is settled.
// It returns an error at once for bad options, and later only if the consumer disappears
// (deleted or not found).
//
// Concurrency and order: messages with the same NATS subject (one sandbox, one event type)
// are handled one after another in delivery order; different subjects run in parallel, up
// to WithWorkers. A message Nak'd for retry comes back after later ones of its subject, and
// replicas of a service do not coordinate order, so handlers check the world (rule 2).
//
// Every message this process holds, running or waiting (for its subject or a worker), is
// marked InProgress every AckWait/3, so a long hook does not cause a redelivery; only a
// crashed or stalled process lets AckWait (and the consumer's BackOff) expire.
//
// Stopping: once ctx is cancelled no pull request is sent and no handler is started.
// Messages not started (waiting for their subject or a worker, or delivered after the cancel
// by the pull request still outstanding) are Nak'd at once, so another replica takes them.
// The outstanding pull request is not abandoned but read to its end, at most the pull wait
// (WithPullWait) after it was sent, plus a second: the server would go on delivering into
// it, and a message delivered to a request nobody reads sits unseen until AckWait. When no
// other replica's request is waiting, the server may hand a Nak'd message straight back
// into it; such a message is kept until the request is over and Nak'd then (see decline).
// Then handlers' contexts are cancelled, and Consume waits for the running handlers to
// return and settles their messages. So Consume returns about the pull wait after ctx is
// cancelled at worst, plus the time its handlers take to return.
func Consume(ctx context.Context, cons jetstream.Consumer, handler Handler, opts ...ConsumeOption) error {
	if cons == nil || handler == nil {
		return errors.New("consume: nil consumer or handler")
	}
	info := cons.CachedInfo()
	if info == nil {
		return errors.New("consume: consumer has no cached info")
	}
	o := consumeOptions{
		workers:    4,
		retry:      retryPolicy{min: time.Second, max: time.Minute},
		progress:   info.Config.AckWait / 3,
		pullWait:   5 * time.Second,
		errorPause: time.Second,
	}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.workers < 1:
		return fmt.Errorf("consume %s: workers %d: want >= 1", info.Name, o.workers)
	case o.retry.min <= 0 || o.retry.max < o.retry.min:
		return fmt.Errorf("consume %s: retry backoff %s..%s: want 0 < min <= max", info.Name, o.retry.min, o.retry.max)
	case o.progress <= 0 || (info.Config.AckWait > 0 && o.progress >= info.Config.AckWait):
		return fmt.Errorf("consume %s: progress interval %s: want > 0 and < ack wait %s", info.Name, o.progress, info.Config.AckWait)
	case o.pullWait < 100*time.Millisecond:
		return fmt.Errorf("consume %s: pull wait %s: want >= 100ms", info.Name, o.pullWait)
	case o.handlerTimeout < 0:
		return fmt.Errorf("consume %s: handler timeout %s: want >= 0", info.Name, o.handlerTimeout)
	}

	l := &loop{
		cons:       cons,
		handler:    handler,
		o:          o,
		name:       info.Name,
		ackWait:    info.Config.AckWait,
		backoff:    info.Config.BackOff,
		maxDeliver: info.Config.MaxDeliver,
		slots:      make(chan struct{}, 2*o.workers),
		running:    make(chan struct{}, o.workers),
		queues:     map[string][]*held{},
		held:       map[*held]struct{}{},
		declined:   map[uint64]struct{}{},
	}
	o.metrics.initTerminated(l.name, filtersOf(info.Config))
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("consumer", l.name))
	// stopping ends when ctx does or pulling fails for good; handlers keep ctx's values but
	// are cancelled only after the last pull request is over.
	stopping, stop := context.WithCancel(ctx)
	handlers, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))

	stopKeepAlive, keepAliveDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(keepAliveDone)
		l.keepAlive(ctx, stopKeepAlive)
	}()

	err := l.pull(stopping, handlers)
	stop()
	l.endPull(handlers)
	cancelHandlers()
	l.workers.Wait()
	close(stopKeepAlive)
	<-keepAliveDone
	return err
}
