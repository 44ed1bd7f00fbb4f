package statusagg

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// streamGrace is how long statusagg's NATS connection may be down before the
// ops that have not ended say so (EventStreamUnavailable): longer than a
// reconnect after a NATS node restarts, short enough that a user who looks
// because nothing moves finds the cause.
const streamGrace = 10 * time.Second

// streamHealthEvery is how often the connection's state is read.
const streamHealthEvery = time.Second

// streamHealth follows statusagg's NATS connection for the ops condition
// EventStreamUnavailable. While NATS is down every service is (they share
// it), so no sandbox moves on, and without this an ops only stands still:
// `kubectl molt status` and `kubectl describe suo` would not say why.
type streamHealth struct {
	mu sync.Mutex
	// cur is the outage as last seen: its since is zero while the
	// connection is up; its server is set once, at start.
	cur outage
	// shown is whether the ops are told (down for streamGrace or more).
	shown bool
}

// outage is what the ops condition says.
type outage struct {
	// since is when the connection was last seen leave CONNECTED.
	since time.Time
	// status and lastErr are the connection's state and last error then.
	status  nats.Status
	lastErr error
	// server names NATS in the message (its URL, without credentials).
	server string
}

// down returns the outage the ops are told of: ok false while NATS is
// reachable, or down for less than streamGrace.
func (h *streamHealth) down() (outage, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.shown {
		return outage{}, false
	}
	return h.cur, true
}

// observe records the connection's state at now and reports whether the
// ops must be told (the outage passed streamGrace, or it ended after it
// was shown).
func (h *streamHealth) observe(now time.Time, status nats.Status, lastErr error) (changed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if status == nats.CONNECTED {
		changed = h.shown
		h.cur = outage{server: h.cur.server}
		h.shown = false
		return changed
	}
	if h.cur.since.IsZero() {
		h.cur.since = now
	}
	h.cur.status = status
	if lastErr != nil {
		h.cur.lastErr = lastErr
	}
	if !h.shown && now.Sub(h.cur.since) >= streamGrace {
		h.shown = true
		return true
	}
	return false
}

// followStream reads nc's state every streamHealthEvery until ctx ends, and
// enqueues every ops when what they must say changes.
func (s *server) followStream(ctx context.Context, nc *nats.Conn) error {
	tick := time.NewTicker(streamHealthEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if !s.stream.observe(time.Now(), nc.Status(), nc.LastError()) {
			continue
		}
		_, down := s.stream.down()
		klog.FromContext(ctx).Info("NATS reachability changed: re-syncing every ops", "down", down)
		list, err := s.ops.List(labels.Everything())
		if err != nil {
			continue
		}
		for _, o := range list {
			if !upgrade.IsFinished(o) {
				s.opsCtl.EnqueueKey(o.Namespace + "/" + o.Name)
			}
		}
	}
}

// withStreamOutage sets EventStreamUnavailable on st, the status of an ops
// that has not ended, while o says NATS is down, and removes it otherwise
// (and from an ops that ends: a Failed one, by the watchdog, may end during
// an outage, and would otherwise say it for good).
func withStreamOutage(st *agentsv1alpha1.SandboxUpdateOpsStatus, o outage, down bool, generation int64) {
	if !down || upgrade.FinalPhase(st.Phase) {
		meta.RemoveStatusCondition(&st.Conditions, agentsv1alpha1.ConditionEventStreamUnavailable)
		return
	}
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionEventStreamUnavailable); c != nil && c.Status == metav1.ConditionTrue {
		return // said once per outage: its words do not change with each sync
	}
	cause := o.status.String()
	if o.lastErr != nil {
		cause += ", last error: " + o.lastErr.Error()
	}
	setCondition(&st.Conditions, metav1.Condition{
		Type: agentsv1alpha1.ConditionEventStreamUnavailable, Status: metav1.ConditionTrue,
		Reason: agentsv1alpha1.EventStreamReasonNATSUnreachable, ObservedGeneration: generation,
		Message: fmt.Sprintf("statusagg has not reached NATS at %s since %s (connection %s): no sandbox moves on until NATS is back; nothing is lost, each stage goes on from where it stopped (one stalled past --redrives + 3 of its deadlines is failed, saying NATS could not be used); check NATS: `make status` locally, or `kubectl get pods -n molt-system -l app.kubernetes.io/name=nats` and its logs",
			o.server, o.since.UTC().Format(time.RFC3339), cause),
	})
}
