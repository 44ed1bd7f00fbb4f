package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/klog/v2"
)

// Object label values of molt_events_config_drift.
const (
	objectStream   = "stream"
	objectConsumer = "consumer"
)

// drift is one field whose running value differs from the one molt would set. Fields are
// named as in the server's JSON config (`nats stream info --json`, `nats consumer info
// --json`), so an operator finds them where they would edit them.
type drift struct {
	field, running, wanted string
}

// EnsureStream makes sure StreamName exists; every service calls it at start-up, and
// Endpoint again after the stream was deleted. Its steps:
//
//  1. Look the stream up; if it does not exist, create it from cfg and return it.
//  2. If it exists, keep it as it is: an operator may have raised its replicas or its
//     limits, and a restart must not reset them.
//  3. Refuse a stream none of whose subjects overlaps molt.>: it cannot carry molt's events.
//  4. Report every other difference in the fields molt sets (streamDrift): a log line naming
//     the field, the running and the wanted value, and molt_events_config_drift = 1 on
//     cfg.Metrics.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	want, err := cfg.jetstream()
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w: %w", StreamName, ErrUnusable, err)
	}
	s, err := js.Stream(ctx, StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		var createErr error
		if s, createErr = js.CreateStream(ctx, want); createErr == nil {
			klog.FromContext(ctx).Info("Created stream", "stream", StreamName, "subjects", want.Subjects,
				"storage", want.Storage, "replicas", want.Replicas, "maxAge", want.MaxAge, "maxBytes", want.MaxBytes)
			cfg.Metrics.recordDrift(objectStream, StreamName, nil)
			return s, nil
		}
		// Another service may have created it meanwhile, with its own config: compare with that.
		if s, err = js.Stream(ctx, StreamName); err != nil {
			return nil, fmt.Errorf("create stream %s: %w", StreamName, createErr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", StreamName, err)
	}
	running := s.CachedInfo().Config
	if !slices.ContainsFunc(running.Subjects, func(r string) bool {
		return slices.ContainsFunc(want.Subjects, func(w string) bool { return subjectsOverlap(r, w) })
	}) {
		return nil, fmt.Errorf("stream %s has subjects %v, none of them within %s, so it cannot carry molt's events (%w): "+
			"add %s to its subjects (nats stream edit %s --subjects ...), or remove it so that molt creates it",
			StreamName, running.Subjects, StreamSubjects, ErrUnusable, StreamSubjects, StreamName)
	}
	reportDrift(ctx, cfg.Metrics, objectStream, StreamName, streamDrift(running, want))
	return s, nil
}

// streamDrift lists the fields molt sets whose running value differs from the wanted one.
// allow_direct is among them though molt leaves it false: on a stream that allows direct
// gets, nats.go reads a message through $JS.API.DIRECT.GET.<stream>..., which a NATS user
// must be allowed to publish to (deploy/nats/auth.conf allows statusagg both that and
// MSG.GET; a config made before it may not).
func streamDrift(running, want jetstream.StreamConfig) []drift {
	var d differ
	d.add("subjects", sortedSet(running.Subjects), sortedSet(want.Subjects))
	d.add("retention", running.Retention, want.Retention)
	d.add("storage", running.Storage, want.Storage)
	d.add("max_age", running.MaxAge, want.MaxAge)
	d.add("max_bytes", running.MaxBytes, want.MaxBytes)
	d.add("duplicate_window", running.Duplicates, want.Duplicates)
	d.add("num_replicas", running.Replicas, want.Replicas)
	d.add("discard", running.Discard, want.Discard)
	d.add("allow_direct", running.AllowDirect, want.AllowDirect)
	return d
}

// EnsureConsumer makes sure the durable pull consumer name (one of the Consumer constants)
// exists on StreamName; a service calls it at start-up, and Endpoint again after the
// consumer or the stream was deleted. Its steps:
//
//  1. Look the consumer up; if it does not exist, create it from cfg, starting at most
//     cfg.ReplayWindow back into the stream's history (deliverFrom), and return it.
//  2. If it exists, keep it, except its filter subjects: they are code, the contract between
//     the services, so they are set to FilterSubjects(name) when they differ, and logged.
//  3. Report every difference in ack wait, max deliver, backoff and max ack pending
//     (consumerDrift) as for the stream; overwrite none.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, name string, cfg ConsumerConfig) (jetstream.Consumer, error) {
	return ensureConsumer(ctx, js, name, cfg, time.Now())
}

// ensureConsumer is EnsureConsumer at the time now.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, name string, cfg ConsumerConfig, now time.Time) (jetstream.Consumer, error) {
	want, err := cfg.jetstream(name)
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s: %w: %w", name, ErrUnusable, err)
	}
	logger := klog.FromContext(ctx)
	c, err := js.Consumer(ctx, StreamName, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		var createErr error
		if c, createErr = createConsumer(ctx, js, want, cfg.replayWindow(), now); createErr == nil {
			cfg.Metrics.recordDrift(objectConsumer, name, nil)
			return c, nil
		}
		// Another replica may have created it meanwhile, with its own start: use that.
		if c, err = js.Consumer(ctx, StreamName, name); err != nil {
			return nil, createErr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("look up consumer %s on stream %s: %w", name, StreamName, err)
	}
	running := c.CachedInfo().Config
	if got, wanted := filtersOf(running), filtersOf(want); !slices.Equal(got, wanted) {
		update := running
		update.FilterSubject, update.FilterSubjects = want.FilterSubject, want.FilterSubjects
		if c, err = js.UpdateConsumer(ctx, StreamName, update); err != nil {
			return nil, fmt.Errorf("update filter subjects of consumer %s from %v to %v: %w", name, got, wanted, err)
		}
		logger.Info("Updated consumer filter subjects", "consumer", name, "from", got, "to", wanted)
	}
	reportDrift(ctx, cfg.Metrics, objectConsumer, name, consumerDrift(running, want))
	return c, nil
}

// createConsumer creates the consumer want, starting where deliverFrom says for the stream's
// current state.
func createConsumer(ctx context.Context, js jetstream.JetStream, want jetstream.ConsumerConfig, window time.Duration, now time.Time) (jetstream.Consumer, error) {
	s, err := js.Stream(ctx, StreamName)
	if err != nil {
		return nil, fmt.Errorf("create consumer %s: look up stream %s: %w", want.Durable, StreamName, err)
	}
	want.DeliverPolicy, want.OptStartTime = deliverFrom(s.CachedInfo().State, now, window)
	c, err := js.CreateConsumer(ctx, StreamName, want)
	if err != nil {
		return nil, fmt.Errorf("create consumer %s: %w", want.Durable, err)
	}
	kv := []any{"consumer", want.Durable, "filters", filtersOf(want), "deliver", want.DeliverPolicy}
	if want.OptStartTime != nil {
		kv = append(kv, "from", *want.OptStartTime)
	}
	klog.FromContext(ctx).Info("Created consumer", kv...)
	return c, nil
}

// deliverFrom says where a consumer created now on a stream in state st begins: at the first
// message if none is older than window, so that nothing published before the consumer
// existed is lost; otherwise at now − window, so that a consumer created anew on a stream
// holding days of history replays its last window (handlers are idempotent), not every
// upgrade since.
func deliverFrom(st jetstream.StreamState, now time.Time, window time.Duration) (jetstream.DeliverPolicy, *time.Time) {
	start := now.Add(-window).UTC()
	if st.Msgs == 0 || !st.FirstTime.Before(start) {
		return jetstream.DeliverAllPolicy, nil
	}
	return jetstream.DeliverByStartTimePolicy, &start
}

// consumerDrift lists the tunable fields of a consumer whose running value differs from the
// wanted one. Filter subjects are not among them: EnsureConsumer sets those.
func consumerDrift(running, want jetstream.ConsumerConfig) []drift {
	var d differ
	d.add("ack_wait", running.AckWait, want.AckWait)
	d.add("max_deliver", running.MaxDeliver, want.MaxDeliver)
	d.add("backoff", running.BackOff, want.BackOff)
	d.add("max_ack_pending", running.MaxAckPending, want.MaxAckPending)
	return d
}

// filtersOf returns a consumer's filter subjects, sorted, wherever the config holds them.
func filtersOf(c jetstream.ConsumerConfig) []string {
	if len(c.FilterSubjects) > 0 {
		return sortedSet(c.FilterSubjects)
	}
	if c.FilterSubject != "" {
		return []string{c.FilterSubject}
	}
	return nil
}

// reportDrift logs each difference and sets molt_events_config_drift for object/name to
// exactly ds.
func reportDrift(ctx context.Context, m *Metrics, object, name string, ds []drift) {
	logger := klog.FromContext(ctx)
	for _, d := range ds {
		// Structured logging has no warning level; Info at V(0) is what klog maps warnings to.
		logger.Info("Warning: running config differs from molt's; keeping the running value",
			object, name, "field", d.field, "running", d.running, "wanted", d.wanted)
	}
	m.recordDrift(object, name, ds)
}

// differ collects drifts, comparing values by their printed form (durations, policies,
// numbers and sorted subject lists print unambiguously).
type differ []drift

func (d *differ) add(field string, running, wanted any) {
	r, w := fmt.Sprint(running), fmt.Sprint(wanted)
	if r != w {
		*d = append(*d, drift{field: field, running: r, wanted: w})
	}
}

func sortedSet(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// subjectsOverlap reports whether some subject matches both NATS subject patterns a and b
// (tokens separated by dots, * one token, > one or more trailing tokens).
func subjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		if i == len(at) || i == len(bt) {
			return len(at) == len(bt)
		}
		x, y := at[i], bt[i]
		if x == ">" || y == ">" {
			return true
		}
		if x != "*" && y != "*" && x != y {
			return false
		}
	}
}
