package events

import (
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Durable consumer names, one per service that reacts to events; every replica of a service
// reads through the same consumer, so replicas share the work. Each is created by
// EnsureConsumer in that service. The selector opens none: it publishes requested and learns
// how an attempt ended from the Sandbox status (its informer).
const (
	// ConsumerPatcher: patcher reacts to requested (and its re-drive).
	ConsumerPatcher = "patcher"
	// ConsumerHookRunner: hookrunner runs preUpgrade on patched.
	ConsumerHookRunner = "hookrunner"
	// ConsumerHookRunnerPost: hookrunner runs postUpgrade on pod-ready (and its re-drive). A consumer of its
	// own, so that a new pod's restore never waits behind other sandboxes' backups.
	ConsumerHookRunnerPost = "hookrunner-post"
	// ConsumerPodCycler: podcycler recreates the pod on prehook-done (and its re-drive).
	ConsumerPodCycler = "podcycler"
	// ConsumerStatusAgg: statusagg aggregates every event into status, Events and metrics.
	ConsumerStatusAgg = "statusagg"
)

// filterFor returns molt.*.*.<token>: one event type, every sandbox.
func filterFor(token string) string { return SubjectPrefix + ".*.*." + token }

// Each consumer of a re-driven input also takes its re-drive (TypeRedriveRequested, ...),
// which Decode hands over as that input.
var consumerFilters = map[string][]string{
	ConsumerPatcher:        {filterFor(TokenRequested), filterFor(TokenRedriveRequested)},
	ConsumerHookRunner:     {filterFor(TokenPatched)},
	ConsumerHookRunnerPost: {filterFor(TokenPodReady), filterFor(TokenRedrivePodReady)},
	ConsumerPodCycler:      {filterFor(TokenPreHookDone), filterFor(TokenRedrivePreHookDone)},
	ConsumerStatusAgg:      {StreamSubjects},
}

// Consumers returns the name of every durable consumer, sorted.
func Consumers() []string {
	out := make([]string, 0, len(consumerFilters))
	for c := range consumerFilters {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// FilterSubjects returns the filter subjects of a durable consumer named by one of the
// Consumer constants, or nil for an unknown name.
func FilterSubjects(consumer string) []string {
	return slices.Clone(consumerFilters[consumer])
}

// StreamConfig tunes EnsureStream. The zero value is the production default.
type StreamConfig struct {
	// Storage is jetstream.FileStorage (the zero value) or jetstream.MemoryStorage for tests.
	Storage jetstream.StorageType
	// MaxAge bounds how long history is kept; default 7 days.
	MaxAge time.Duration
	// MaxBytes bounds the stream size; default 1 GiB. Oldest messages are discarded first.
	MaxBytes int64
	// Duplicates is the window within which a Nats-Msg-Id is remembered; default 2 minutes.
	Duplicates time.Duration
	// Replicas is the stream replication factor; default 1 (use 3 on a JetStream cluster).
	Replicas int
	// Metrics, if not nil, receives molt_events_config_drift for the running stream (Open
	// sets it). Nil: differences are only logged.
	Metrics *Metrics
}

// Stream defaults.
const (
	DefaultMaxAge     = 7 * 24 * time.Hour
	DefaultMaxBytes   = 1 << 30
	DefaultDuplicates = 2 * time.Minute
)

func (c StreamConfig) jetstream() (jetstream.StreamConfig, error) {
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.Duplicates == 0 {
		c.Duplicates = DefaultDuplicates
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	switch {
	case c.MaxAge < 0 || c.Duplicates < 0 || c.MaxBytes < 0 || c.Replicas < 0:
		return jetstream.StreamConfig{}, fmt.Errorf("negative limit: max age %s, max bytes %d, duplicates %s, replicas %d",
			c.MaxAge, c.MaxBytes, c.Duplicates, c.Replicas)
	case c.Duplicates > c.MaxAge:
		return jetstream.StreamConfig{}, fmt.Errorf("duplicates window %s exceeds max age %s", c.Duplicates, c.MaxAge)
	}
	return jetstream.StreamConfig{
		Name:        StreamName,
		Description: "molt sandbox upgrade events, one subject per sandbox",
		Subjects:    []string{StreamSubjects},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		Storage:     c.Storage,
		MaxAge:      c.MaxAge,
		MaxBytes:    c.MaxBytes,
		MaxMsgs:     -1,
		Duplicates:  c.Duplicates,
		Replicas:    c.Replicas,
	}, nil
}

// ConsumerConfig tunes EnsureConsumer. The zero value is the production default.
type ConsumerConfig struct {
	// PublishOnly says the service consumes nothing (the selector): Open ensures the stream
	// and makes the Publisher, and no consumer; Consume then refuses to run.
	PublishOnly bool
	// AckWait is how long the server waits for an ack before redelivering; default 30s.
	// Consume sends InProgress every AckWait/3 while a handler runs, so this bounds how long a
	// crashed replica holds a message, not how long a handler may take.
	AckWait time.Duration
	// MaxDeliver bounds deliveries of one message; default 10. -1 means unlimited. On the last
	// delivery a failing handler's message is terminated (see classify).
	MaxDeliver int
	// BackOff spaces redeliveries after ack timeouts (a replica died or stalled). Default:
	// AckWait, 2×, 4×, 8×. When set, BackOff[0] is the ack wait (the server enforces this);
	// an AckWait that differs from it is an error. Naks use their own delay (classify).
	BackOff []time.Duration
	// MaxAckPending bounds unacknowledged messages across all replicas; default 1000.
	MaxAckPending int
	// ReplayWindow bounds how far back into the stream's history a consumer created anew (a
	// first start, or after it or the stream was deleted) begins: at the first message if
	// none is older than this, else at now − ReplayWindow. Default 1 hour. Messages within
	// the window are handled again, which idempotent handlers allow; older ones are not.
	ReplayWindow time.Duration
	// Metrics, if not nil, receives molt_events_config_drift for the running consumer (Open
	// sets it). Nil: differences are only logged.
	Metrics *Metrics
}

// Consumer defaults.
const (
	DefaultAckWait       = 30 * time.Second
	DefaultMaxDeliver    = 10
	DefaultMaxAckPending = 1000
	DefaultReplayWindow  = time.Hour
)

func (c ConsumerConfig) replayWindow() time.Duration {
	if c.ReplayWindow == 0 {
		return DefaultReplayWindow
	}
	return c.ReplayWindow
}

func (c ConsumerConfig) jetstream(name string) (jetstream.ConsumerConfig, error) {
	filters, ok := consumerFilters[name]
	if !ok {
		return jetstream.ConsumerConfig{}, fmt.Errorf("unknown consumer name (want one of the Consumer constants)")
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if len(c.BackOff) == 0 {
		if c.AckWait == 0 {
			c.AckWait = DefaultAckWait
		}
		c.BackOff = []time.Duration{c.AckWait, 2 * c.AckWait, 4 * c.AckWait, 8 * c.AckWait}
	}
	switch {
	case c.AckWait == 0:
		c.AckWait = c.BackOff[0]
	case c.AckWait != c.BackOff[0]:
		return jetstream.ConsumerConfig{}, fmt.Errorf("ack wait %s differs from backoff[0] %s", c.AckWait, c.BackOff[0])
	}
	switch {
	case c.AckWait < 0 || slices.ContainsFunc(c.BackOff, func(d time.Duration) bool { return d <= 0 }):
		return jetstream.ConsumerConfig{}, fmt.Errorf("ack wait and backoff must be positive: %s, %v", c.AckWait, c.BackOff)
	case c.ReplayWindow < 0:
		return jetstream.ConsumerConfig{}, fmt.Errorf("replay window %s: want >= 0", c.ReplayWindow)
	case c.MaxDeliver < -1:
		return jetstream.ConsumerConfig{}, fmt.Errorf("max deliver %d: want -1 or > 0", c.MaxDeliver)
	case c.MaxDeliver != -1 && c.MaxDeliver < len(c.BackOff):
		// The server requires len(BackOff) <= MaxDeliver; trim the tail rather than refuse a
		// small MaxDeliver chosen for a test or a quick-failing stage.
		c.BackOff = c.BackOff[:c.MaxDeliver]
	}
	// DeliverPolicy is decided when the consumer is created (deliverFrom).
	cc := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "molt " + name,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		BackOff:       c.BackOff,
		MaxAckPending: c.MaxAckPending,
	}
	// One filter goes in FilterSubject, several in FilterSubjects (the server refuses both).
	if len(filters) == 1 {
		cc.FilterSubject = filters[0]
	} else {
		cc.FilterSubjects = slices.Clone(filters)
	}
	return cc, nil
}
