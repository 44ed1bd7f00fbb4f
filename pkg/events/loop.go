package events

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/klog/v2"
)

// loop is the state of one Consume call. Two contexts drive it and are passed, not stored:
// stopping (no new pulls, no new handlers once done) and handlers (the handlers' context,
// cancelled only after the last pull request has ended).
type loop struct {
	cons       jetstream.Consumer
	handler    Handler
	o          consumeOptions
	name       string
	ackWait    time.Duration
	backoff    []time.Duration
	maxDeliver int

	// slots holds one token per message held (requested in a pull, queued or running);
	// running one per handler running.
	slots   chan struct{}
	running chan struct{}
	workers sync.WaitGroup

	mu     sync.Mutex
	queues map[string][]*held // per subject; key present while its worker runs
	held   map[*held]struct{} // every message received and not yet settled, for keepAlive
}

// held is a received message not yet acked, nak'd or terminated.
type held struct {
	msg  jetstream.Msg
	mu   sync.Mutex
	done bool
}

func (h *held) inProgress() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return nil
	}
	return h.msg.InProgress()
}

// settle sends the final acknowledgement (Ack, Nak or Term) once.
func (h *held) settle(ack func() error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	return ack()
}

// pull requests as many messages as there are free slots, one pull request at a time (so
// messages reach dispatch in delivery order), until stopping ends. It returns only when no
// pull request of this loop is outstanding at the server.
func (l *loop) pull(stopping, handlers context.Context) error {
	logger := klog.FromContext(stopping)
	for {
		n, ok := l.acquire(stopping)
		if !ok {
			return nil
		}
		// Not cancelled by stopping: a pull request abandoned by the client stays at the
		// server until it expires, and would swallow messages Nak'd in the meantime.
		batch, err := l.cons.Fetch(n, jetstream.FetchMaxWait(l.o.pullWait))
		got := 0
		if err == nil {
			for m := range batch.Messages() {
				got++
				l.dispatch(stopping, handlers, m)
			}
			err = batch.Error()
		}
		l.release(n - got)
		switch {
		case err == nil:
			continue
		case errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound):
			return fmt.Errorf("consume %s: %w", l.name, err)
		}
		logger.Error(err, "Pull failed, retrying", "pause", l.o.errorPause)
		t := time.NewTimer(l.o.errorPause)
		select {
		case <-stopping.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// acquire blocks for one free slot, then takes every other free one.
func (l *loop) acquire(ctx context.Context) (int, bool) {
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	n := 1
	for n < cap(l.slots) {
		select {
		case l.slots <- struct{}{}:
			n++
		default:
			return n, true
		}
	}
	return n, true
}

func (l *loop) release(n int) {
	for range n {
		<-l.slots
	}
}

// dispatch queues m behind earlier messages of its subject, starting that subject's worker
// if none runs.
func (l *loop) dispatch(stopping, handlers context.Context, m jetstream.Msg) {
	h := &held{msg: m}
	subject := m.Subject()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[h] = struct{}{}
	q, active := l.queues[subject]
	l.queues[subject] = append(q, h)
	if !active {
		l.workers.Add(1)
		go l.work(stopping, handlers, subject)
	}
}

// work handles the messages of one subject in order until its queue is empty. Once stopping
// is done it starts no handler; it Naks the rest as soon as handlers is cancelled, i.e. when
// no pull request can receive the redelivery.
func (l *loop) work(stopping, handlers context.Context, subject string) {
	defer l.workers.Done()
	for {
		l.mu.Lock()
		q := l.queues[subject]
		if len(q) == 0 {
			delete(l.queues, subject)
			l.mu.Unlock()
			return
		}
		h := q[0]
		q[0] = nil
		l.queues[subject] = q[1:]
		l.mu.Unlock()

		select {
		case l.running <- struct{}{}:
			if stopping.Err() == nil {
				l.process(handlers, h)
			} else {
				l.handBack(handlers, h)
			}
			<-l.running
		case <-stopping.Done():
			l.handBack(handlers, h)
		}

		l.mu.Lock()
		delete(l.held, h)
		l.mu.Unlock()
		l.release(1)
	}
}

// handBack Naks a message that was never started, once handlers is cancelled.
func (l *loop) handBack(handlers context.Context, h *held) {
	<-handlers.Done()
	if err := h.settle(h.msg.Nak); err != nil {
		klog.FromContext(handlers).Error(err, "Nak on shutdown failed; the server will redeliver after AckWait", "subject", h.msg.Subject())
	}
}

// process decodes, handles and settles one message.
func (l *loop) process(ctx context.Context, h *held) {
	logger := klog.FromContext(ctx)
	msg := &Message{Subject: h.msg.Subject(), maxDeliver: l.maxDeliver, h: h}
	if meta, err := h.msg.Metadata(); err == nil {
		msg.Seq, msg.NumDelivered = meta.Sequence.Stream, meta.NumDelivered
	}
	logger = logger.WithValues("seq", msg.Seq)
	start := time.Now()
	eventType := typeUnknown
	ev, err := Decode(h.msg.Data())
	if err == nil {
		msg.Event, eventType = ev, ev.Type
		d := ev.Data
		logger = logger.WithValues("sandbox", klog.KRef(d.Sandbox.Namespace, d.Sandbox.Name),
			"stage", d.Stage, "attempt", d.Attempt, "type", ev.Type)
		if d.Ops.Name != "" { // empty for a direct upgrade
			logger = logger.WithValues("ops", klog.KRef(d.Sandbox.Namespace, d.Ops.Name))
		}
		err = l.call(klog.NewContext(ctx, logger), msg)
	}
	a := classify(err, msg.NumDelivered, l.maxDeliver, l.o.retry)
	took := time.Since(start)

	var settleErr error
	switch a.kind {
	case actAck:
		settleErr = h.settle(h.msg.Ack)
		logger.V(4).Info("Handled event", "took", took)
	case actNak:
		wire := wireNakDelay(a.delay, msg.NumDelivered, l.ackWait, l.backoff)
		settleErr = h.settle(func() error {
			if wire == 0 {
				return h.msg.Nak()
			}
			return h.msg.NakWithDelay(wire)
		})
		logger.Info("Handler failed, will retry", "err", err, "delivered", msg.NumDelivered, "delay", a.delay)
	case actTerm:
		settleErr = h.settle(func() error { return h.msg.TermWithReason(termReason(a, err)) })
		logger.Error(err, "Terminated event", "reason", a.result, "subject", msg.Subject, "delivered", msg.NumDelivered)
		if l.o.onTerminated != nil {
			t := Terminated{Consumer: l.name, Subject: msg.Subject, Seq: msg.Seq, NumDelivered: msg.NumDelivered,
				Reason: a.result, Err: err, Body: h.msg.Data()}
			if eventType != typeUnknown {
				t.Event = &msg.Event
			}
			l.o.onTerminated(ctx, t)
		}
	}
	if settleErr != nil {
		logger.Error(settleErr, "Acknowledgement failed; the server will redeliver", "result", a.result)
	}
	l.o.metrics.recordHandled(l.name, eventType, a.result, took)
}

// call runs the handler with the optional timeout, turning a panic into a plain error so one
// bad event cannot stop a service's other sandboxes (it is retried, then terminated).
func (l *loop) call(ctx context.Context, msg *Message) (err error) {
	if l.o.handlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.o.handlerTimeout)
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			klog.FromContext(ctx).Error(nil, "Handler panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return l.handler(ctx, msg)
}

// keepAlive marks every held message InProgress each progress interval until stop closes.
func (l *loop) keepAlive(ctx context.Context, stop <-chan struct{}) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(l.o.progress)
	defer t.Stop()
	var hs []*held
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		hs = hs[:0]
		l.mu.Lock()
		for h := range l.held {
			hs = append(hs, h)
		}
		l.mu.Unlock()
		for _, h := range hs {
			if err := h.inProgress(); err != nil {
				logger.V(2).Info("InProgress failed", "subject", h.msg.Subject(), "err", err)
			}
		}
	}
}
