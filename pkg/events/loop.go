package events

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
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
	// While stopping and the last pull request is not over (see decline): stream sequences
	// Nak'd since stopping began, and messages kept to be Nak'd when that request is over.
	declined map[uint64]struct{}
	kept     []*held
	pullOver bool
}

// pullGrace is how long past its expiry pull waits for a pull request to end before it
// stops reading it (the server ends it at expiry with a 408 status; only a lost status or a
// lost connection leaves it open, and nats.go's Fetch restarts its own fallback timer for
// every message it receives).
const pullGrace = time.Second

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
// messages reach dispatch in delivery order), until stopping ends. It sends no pull request
// and dispatches no message once stopping is done; messages that still arrive are declined.
// It returns only when no pull request of this loop is outstanding at the server.
func (l *loop) pull(stopping, handlers context.Context) error {
	logger := klog.FromContext(stopping)
	for {
		n, ok := l.acquire(stopping)
		if !ok {
			return nil
		}
		// Not cancelled by stopping: a pull request abandoned by the client stays at the
		// server until it expires, and messages it delivers would sit unseen until AckWait.
		deadline := time.Now().Add(l.o.pullWait + pullGrace)
		batch, err := l.cons.Fetch(n, jetstream.FetchMaxWait(l.o.pullWait))
		got := 0
		if err == nil {
			got, err = l.receive(stopping, handlers, batch, deadline)
		}
		l.release(n - got)
		switch {
		case err == nil:
			continue
		case consumerGone(err):
			return fmt.Errorf("consume %s: %w", l.name, err)
		case errors.Is(err, nats.ErrNoResponders):
			// Nobody serves this consumer's pull requests: it (or its stream) may be gone
			// between two pulls, or a cluster may be electing its leader. Ask.
			if gone := l.gone(stopping); gone != nil {
				return fmt.Errorf("consume %s: %w", l.name, gone)
			}
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

// consumerGone reports whether err says that the consumer, or its stream, no longer exists.
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrStreamNotFound)
}

// gone asks the server whether the consumer still exists, and returns the answer's error
// if it does not; nil if it does or the question failed otherwise.
func (l *loop) gone(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.o.pullWait)
	defer cancel()
	if _, err := l.cons.Info(ctx); consumerGone(err) {
		return err
	}
	return nil
}

// receive reads one pull request's batch until it ends, dispatching its messages, or
// declining them once stopping is done. It returns how many it dispatched (each keeps its
// slot until its worker is through with it). If the batch is still open at deadline, well
// past the request's expiry, it stops waiting: whatever the batch still delivers is Nak'd.
func (l *loop) receive(stopping, handlers context.Context, batch jetstream.MessageBatch, deadline time.Time) (int, error) {
	msgs := batch.Messages()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	got := 0
	take := func(m jetstream.Msg) {
		// Checked for every message, not selected against: nothing is handed out once
		// stopping is done.
		if stopping.Err() != nil {
			l.decline(handlers, &held{msg: m})
			return
		}
		got++
		l.dispatch(stopping, handlers, m)
	}
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return got, batch.Error()
			}
			take(m)
		case <-t.C:
		arrived: // what has arrived already is taken as usual
			for {
				select {
				case m, ok := <-msgs:
					if !ok {
						return got, batch.Error()
					}
					take(m)
				default:
					break arrived
				}
			}
			logger := klog.FromContext(stopping)
			logger.Info("Pull request still open past its expiry; no longer waiting for it", "pullWait", l.o.pullWait)
			go func() {
				for m := range msgs {
					if err := m.Nak(); err != nil {
						logger.Error(err, "Nak of a late message failed; the server will redeliver after AckWait", "subject", m.Subject())
					}
				}
			}()
			return got, nil
		}
	}
}

// acquire blocks for one free slot, then takes every other free one. It reports false, and
// holds no slot, once ctx is done: checked before and after waiting, because a select whose
// cases are both ready picks one at random.
func (l *loop) acquire(ctx context.Context) (int, bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	n := 1
more:
	for n < cap(l.slots) {
		select {
		case l.slots <- struct{}{}:
			n++
		default:
			break more
		}
	}
	if ctx.Err() != nil {
		l.release(n)
		return 0, false
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
			l.process(stopping, handlers, h)
			<-l.running
		case <-stopping.Done():
			l.decline(handlers, h)
		}
		l.release(1)
	}
}

// decline gives back a message this loop will not handle because it is stopping, with a Nak
// at once, so that another replica's waiting pull request takes it now. If no other request
// is waiting, the server hands it straight back to this loop's last pull request, still open;
// it is then kept (marked InProgress by keepAlive) and Nak'd when that request is over, and
// so is a message whose extra delivery could be its last one. So a decline costs a message
// at most one delivery more than a Nak after the pull would.
func (l *loop) decline(ctx context.Context, h *held) {
	var seq, delivered uint64
	meta, err := h.msg.Metadata()
	if err == nil {
		seq, delivered = meta.Sequence.Stream, meta.NumDelivered
	}
	l.mu.Lock()
	if !l.pullOver {
		_, again := l.declined[seq]
		lastChance := l.maxDeliver > 0 && delivered+1 >= uint64(l.maxDeliver)
		if err != nil || again || lastChance {
			l.held[h] = struct{}{}
			l.kept = append(l.kept, h)
			l.mu.Unlock()
			return
		}
		l.declined[seq] = struct{}{}
	}
	delete(l.held, h)
	l.mu.Unlock()
	l.nak(ctx, h)
}

// endPull is called once no pull request of this loop is outstanding: it Naks the messages
// decline kept, and from now on decline Naks at once.
func (l *loop) endPull(ctx context.Context) {
	l.mu.Lock()
	l.pullOver = true
	kept := l.kept
	l.kept = nil
	for _, h := range kept {
		delete(l.held, h)
	}
	l.mu.Unlock()
	for _, h := range kept {
		l.nak(ctx, h)
	}
}

func (l *loop) nak(ctx context.Context, h *held) {
	if err := h.settle(h.msg.Nak); err != nil {
		klog.FromContext(ctx).Error(err, "Nak on shutdown failed; the server will redeliver after AckWait", "subject", h.msg.Subject())
	}
}

// process decodes, handles and settles one message; once stopping is done it declines it
// instead of calling the handler.
func (l *loop) process(stopping, ctx context.Context, h *held) {
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
		// The loop adds the keys every handler shares, once; a handler adds
		// only "stage", the stage it works in.
		logger = logger.WithValues("sandbox", klog.KRef(d.Sandbox.Namespace, d.Sandbox.Name),
			"attempt", d.Attempt, "type", ev.Type)
		if d.Ops.Name != "" { // empty for a direct upgrade
			logger = logger.WithValues("ops", klog.KRef(d.Sandbox.Namespace, d.Ops.Name))
		}
		if stopping.Err() != nil { // the last check before the handler
			l.decline(ctx, h)
			return
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
	l.mu.Lock()
	delete(l.held, h)
	l.mu.Unlock()
	if settleErr != nil {
		logger.Error(settleErr, "Acknowledgement failed; the server will redeliver", "result", a.result)
	}
	l.o.metrics.recordHandled(l.name, eventType, a.result, took)
}

// call runs the handler with the optional timeout, turning a panic into a plain error so one
// bad event cannot stop a service's other sandboxes (it is retried, then terminated).
func (l *loop) call(ctx context.Context, msg *Message) error {
	if l.o.handlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.o.handlerTimeout)
		defer cancel()
	}
	return recovered(ctx, l.handler, msg)
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
