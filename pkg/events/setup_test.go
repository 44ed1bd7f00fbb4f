package events

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/klog/v2/ktesting"
)

func TestStreamConfig(t *testing.T) {
	tests := []struct {
		name    string
		in      StreamConfig
		check   func(jetstream.StreamConfig) bool
		wantErr string
	}{
		{"defaults", StreamConfig{}, func(c jetstream.StreamConfig) bool {
			return c.Name == StreamName && slices.Equal(c.Subjects, []string{"molt.>"}) && c.Storage == jetstream.FileStorage &&
				c.MaxAge == DefaultMaxAge && c.MaxBytes == DefaultMaxBytes && c.Duplicates == 2*time.Minute && c.Replicas == 1
		}, ""},
		{"memory for tests", StreamConfig{Storage: jetstream.MemoryStorage, MaxAge: time.Hour}, func(c jetstream.StreamConfig) bool {
			return c.Storage == jetstream.MemoryStorage && c.MaxAge == time.Hour
		}, ""},
		{"window beyond age", StreamConfig{MaxAge: time.Minute, Duplicates: time.Hour}, nil, "exceeds max age"},
		{"negative", StreamConfig{MaxBytes: -1}, nil, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.jetstream()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !tt.check(got) {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
}

func TestConsumerConfig(t *testing.T) {
	s := time.Second
	tests := []struct {
		name     string
		consumer string
		in       ConsumerConfig
		check    func(jetstream.ConsumerConfig) bool
		wantErr  string
	}{
		{"defaults, the input and its re-drive", ConsumerPatcher, ConsumerConfig{}, func(c jetstream.ConsumerConfig) bool {
			return c.Durable == "patcher" && c.FilterSubject == "" && slices.Equal(c.FilterSubjects, []string{"molt.*.*.requested", "molt.*.*.redrive-requested"}) &&
				c.AckPolicy == jetstream.AckExplicitPolicy && c.AckWait == 30*s && c.MaxDeliver == 10 &&
				slices.Equal(c.BackOff, []time.Duration{30 * s, 60 * s, 120 * s, 240 * s})
		}, ""},
		{"hookrunner: preUpgrade's input only", ConsumerHookRunner, ConsumerConfig{}, func(c jetstream.ConsumerConfig) bool {
			return c.Durable == "hookrunner" && c.FilterSubject == "molt.*.*.patched" && c.FilterSubjects == nil
		}, ""},
		{"hookrunner-post: postUpgrade's input and its re-drive only", ConsumerHookRunnerPost, ConsumerConfig{}, func(c jetstream.ConsumerConfig) bool {
			return c.Durable == "hookrunner-post" && c.FilterSubject == "" && slices.Equal(c.FilterSubjects, []string{"molt.*.*.pod-ready", "molt.*.*.redrive-pod-ready"})
		}, ""},
		{"ack wait scales default backoff", ConsumerStatusAgg, ConsumerConfig{AckWait: s}, func(c jetstream.ConsumerConfig) bool {
			return c.AckWait == s && slices.Equal(c.BackOff, []time.Duration{s, 2 * s, 4 * s, 8 * s})
		}, ""},
		{"explicit backoff sets ack wait", ConsumerPodCycler, ConsumerConfig{BackOff: []time.Duration{5 * s, 10 * s}}, func(c jetstream.ConsumerConfig) bool {
			return c.AckWait == 5*s && len(c.BackOff) == 2
		}, ""},
		{"backoff trimmed to max deliver", ConsumerPatcher, ConsumerConfig{MaxDeliver: 2}, func(c jetstream.ConsumerConfig) bool {
			return c.MaxDeliver == 2 && len(c.BackOff) == 2
		}, ""},
		{"unlimited deliveries", ConsumerPatcher, ConsumerConfig{MaxDeliver: -1}, func(c jetstream.ConsumerConfig) bool {
			return c.MaxDeliver == -1 && len(c.BackOff) == 4
		}, ""},
		{"unknown consumer", "nobody", ConsumerConfig{}, nil, "unknown consumer"},
		{"ack wait disagrees with backoff", ConsumerPatcher, ConsumerConfig{AckWait: s, BackOff: []time.Duration{2 * s}}, nil, "differs"},
		{"negative ack wait", ConsumerPatcher, ConsumerConfig{AckWait: -s}, nil, "positive"},
		{"bad max deliver", ConsumerPatcher, ConsumerConfig{MaxDeliver: -5}, nil, "max deliver"},
		{"negative replay window", ConsumerPatcher, ConsumerConfig{ReplayWindow: -s}, nil, "replay window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.jetstream(tt.consumer)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !tt.check(got) {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
}

func TestEnsureIsIdempotent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	js := startJetStream(t)
	for range 2 {
		if _, err := EnsureStream(ctx, js, StreamConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	for name := range consumerFilters {
		for range 2 {
			if _, err := EnsureConsumer(ctx, js, name, ConsumerConfig{AckWait: 5 * time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		c, err := js.Consumer(ctx, StreamName, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := consumerInfo(t, ctx, c).Config
		if !slices.Equal(filtersOf(cfg), sortedSet(FilterSubjects(name))) || cfg.Durable != name || cfg.AckPolicy != jetstream.AckExplicitPolicy ||
			cfg.DeliverPolicy != jetstream.DeliverAllPolicy || cfg.AckWait != 5*time.Second || cfg.MaxDeliver != DefaultMaxDeliver ||
			len(cfg.BackOff) != 4 {
			t.Errorf("consumer %s config = %+v", name, cfg)
		}
	}
	stream, err := js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if c := stream.CachedInfo().Config; c.Storage != jetstream.FileStorage || c.MaxAge != DefaultMaxAge ||
		c.Duplicates != DefaultDuplicates || !slices.Equal(c.Subjects, []string{StreamSubjects}) {
		t.Errorf("stream config = %+v", c)
	}
	names := stream.ConsumerNames(ctx)
	var got []string
	for n := range names.Name() {
		got = append(got, n)
	}
	if len(got) != len(consumerFilters) {
		t.Errorf("consumers = %v, want %d", got, len(consumerFilters))
	}
}
