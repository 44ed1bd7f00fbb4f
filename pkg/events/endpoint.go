package events

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Endpoint is a service's attachment to the event stream: the stream and its
// durable consumer exist, and Publisher and Metrics are ready.
type Endpoint struct {
	Publisher *Publisher
	Consumer  jetstream.Consumer
	Metrics   *Metrics
	name      string
}

// Open ensures the stream and the service's durable consumer (name is one
// of the Consumer constants) and registers the event metrics on reg.
func Open(ctx context.Context, js jetstream.JetStream, reg prometheus.Registerer, name string, stream StreamConfig, consumer ConsumerConfig) (*Endpoint, error) {
	if _, err := EnsureStream(ctx, js, stream); err != nil {
		return nil, err
	}
	cons, err := EnsureConsumer(ctx, js, name, consumer)
	if err != nil {
		return nil, err
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register event metrics for %s: %w", name, err)
	}
	pub, err := NewPublisher(js, name, m)
	if err != nil {
		return nil, err
	}
	return &Endpoint{Publisher: pub, Consumer: cons, Metrics: m, name: name}, nil
}

// Consume runs the consume loop of the endpoint's consumer with its metrics.
func (e *Endpoint) Consume(ctx context.Context, h Handler, opts ...ConsumeOption) error {
	return Consume(ctx, e.Consumer, h, append([]ConsumeOption{WithMetrics(e.Metrics)}, opts...)...)
}
