package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/klog/v2"
)

// Publisher publishes molt events for one service.
type Publisher struct {
	js      jetstream.JetStream
	source  string
	metrics *Metrics
}

// NewPublisher returns a Publisher whose events carry source (the producing service, e.g.
// "patcher") as CloudEvent source. m may be nil.
func NewPublisher(js jetstream.JetStream, source string, m *Metrics) (*Publisher, error) {
	if js == nil {
		return nil, errors.New("new publisher: nil JetStream")
	}
	if source == "" {
		return nil, errors.New("new publisher: empty source")
	}
	return &Publisher{js: js, source: source, metrics: m}, nil
}

// Publish validates ev, fills in its ID (MessageID), Source and, if zero, Time, and publishes
// it on its sandbox subject as a structured-mode CloudEvent with Nats-Msg-Id = ID. It returns
// once the stream has acknowledged it. A copy published again within the duplicate window
// (a redelivered handler publishing the same outcome) is dropped by the server and reported
// as success. When the stream does not exist, the error says so; when the NATS connection is
// down or the server refused the subject to this user, it says what the connection last
// reported.
func (p *Publisher) Publish(ctx context.Context, ev Event) error {
	ev.Source = p.source
	ev.ID = MessageID(ev)
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	body, err := Encode(ev)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	subject, err := ev.Subject()
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	msg := &nats.Msg{
		Subject: subject,
		Data:    body,
		Header:  nats.Header{"Content-Type": []string{MediaType}},
	}
	ack, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.ID), jetstream.WithExpectStream(StreamName))
	if err != nil {
		p.metrics.recordPublish(ev.Type, publishError)
		if errors.Is(err, jetstream.ErrNoStreamResponse) && p.streamMissing(ctx) {
			return fmt.Errorf("publish %s to %s: stream %s does not exist (a consuming service creates it again when it re-attaches): %w",
				ev.Type, subject, StreamName, err)
		}
		return fmt.Errorf("publish %s to %s: %w", ev.Type, subject, withConnError(p.js, err))
	}
	result := publishStored
	if ack.Duplicate {
		result = publishDuplicate
	}
	p.metrics.recordPublish(ev.Type, result)
	klog.FromContext(ctx).V(4).Info("Published event", "type", ev.Type, "subject", subject,
		"sandbox", klog.KRef(ev.Data.Sandbox.Namespace, ev.Data.Sandbox.Name), "attempt", ev.Data.Attempt,
		"seq", ack.Sequence, "duplicate", ack.Duplicate)
	return nil
}

// streamMissing reports whether the server says StreamName does not exist: the cause of a
// publish that no stream answered, unless JetStream itself is unreachable.
func (p *Publisher) streamMissing(ctx context.Context) bool {
	_, err := p.js.Stream(ctx, StreamName)
	return errors.Is(err, jetstream.ErrStreamNotFound)
}
