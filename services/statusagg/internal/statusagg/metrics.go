package statusagg

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// Label values of molt_ops_sandboxes{state}.
const (
	stateTotal    = "total"
	stateUpdated  = "updated"
	stateUpdating = "updating"
	stateFailed   = "failed"
)

var opsPhases = []agentsv1alpha1.SandboxUpdateOpsPhase{
	agentsv1alpha1.SandboxUpdateOpsPending, agentsv1alpha1.SandboxUpdateOpsUpdating,
	agentsv1alpha1.SandboxUpdateOpsCompleted, agentsv1alpha1.SandboxUpdateOpsFailed,
}

// metrics are statusagg's progress metrics. Gauges are set from recomputed
// state; the failure counter moves only when a status write records a new
// failure.
type metrics struct {
	opsSandboxes  *prometheus.GaugeVec
	opsPhase      *prometheus.GaugeVec
	oldestStage   *prometheus.GaugeVec
	stageDuration *prometheus.HistogramVec
	failures      *prometheus.CounterVec
	redrives      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		opsSandboxes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "molt", Subsystem: "ops", Name: "sandboxes",
			Help: "Sandboxes counted by a SandboxUpdateOps, by state (total, updated, updating, failed), recomputed from the sandboxes.",
		}, []string{"namespace", "ops", "state"}),
		opsPhase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "molt", Subsystem: "ops", Name: "phase",
			Help: "1 for the current phase of a SandboxUpdateOps (Pending, Updating, Completed, Failed), 0 for the others.",
		}, []string{"namespace", "ops", "phase"}),
		oldestStage: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "molt", Subsystem: "ops", Name: "oldest_stage_start_timestamp_seconds",
			Help: "When the longest-running stage of an ops's sandboxes in flight began (Unix seconds; 0 when none is in flight): time() minus it is how long that stage has run.",
		}, []string{"namespace", "ops"}),
		stageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "molt", Name: "stage_duration_seconds",
			Help:    "Time a sandbox spent in one upgrade stage (Upgrading reason), measured between the events that began and ended it.",
			Buckets: prometheus.ExponentialBuckets(0.1, 2.5, 12),
		}, []string{"stage"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "molt", Name: "upgrade_failures_total",
			Help: "Sandbox upgrade attempts that ended in a failure reason, counted once per attempt.",
		}, []string{"reason"}),
		redrives: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "molt", Name: "stage_redrives_total",
			Help: "Stalled stages the watchdog re-drove by publishing the stage's input event again, by stage.",
		}, []string{"stage"}),
	}
	for _, c := range []prometheus.Collector{m.opsSandboxes, m.opsPhase, m.oldestStage, m.stageDuration, m.failures, m.redrives} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register statusagg metrics: %w", err)
		}
	}
	return m, nil
}

// setOps sets an ops' gauges from its counters and phase.
func (m *metrics) setOps(ops *agentsv1alpha1.SandboxUpdateOps, st agentsv1alpha1.SandboxUpdateOpsStatus) {
	for state, n := range map[string]int32{
		stateTotal: st.Replicas, stateUpdated: st.UpdatedReplicas, stateUpdating: st.UpdatingReplicas, stateFailed: st.FailedReplicas,
	} {
		m.opsSandboxes.WithLabelValues(ops.Namespace, ops.Name, state).Set(float64(n))
	}
	for _, p := range opsPhases {
		v := 0.0
		if p == st.Phase {
			v = 1
		}
		m.opsPhase.WithLabelValues(ops.Namespace, ops.Name, string(p)).Set(v)
	}
}

// setOldestStage sets when the oldest in-flight stage of ops began: the
// earliest UpgradeAttempt transition among its sandboxes whose attempt (the
// ops UID) is in a stage; 0 when none is.
func (m *metrics) setOldestStage(ops *agentsv1alpha1.SandboxUpdateOps, sandboxes []*agentsv1alpha1.Sandbox) {
	var oldest time.Time
	for _, sb := range sandboxes {
		if sb.Labels[agentsv1alpha1.LabelUpdateOps] != ops.Name {
			continue
		}
		reason, ok := upgrade.ReasonFor(sb, string(ops.UID))
		if !ok || !upgrade.InProgress(reason) {
			continue
		}
		if c := meta.FindStatusCondition(sb.Status.Conditions, upgrade.ConditionAttempt); c != nil && (oldest.IsZero() || c.LastTransitionTime.Time.Before(oldest)) {
			oldest = c.LastTransitionTime.Time
		}
	}
	v := 0.0
	if !oldest.IsZero() {
		v = float64(oldest.UnixNano()) / 1e9
	}
	m.oldestStage.WithLabelValues(ops.Namespace, ops.Name).Set(v)
}

// forgetOps drops a deleted ops' series.
func (m *metrics) forgetOps(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "ops": name}
	m.opsSandboxes.DeletePartialMatch(l)
	m.opsPhase.DeletePartialMatch(l)
	m.oldestStage.DeletePartialMatch(l)
}

// stageClock remembers when each sandbox's current stage began (the time of
// the event that began it), to observe the stage's duration when it ends. It
// lives in memory: after a restart, the stages then in progress are not
// observed, which loses a sample but never counts one twice.
type stageClock struct {
	mu     sync.Mutex
	starts map[string]stageStart // by sandbox key
}

type stageStart struct {
	attempt, stage string
	at             time.Time
}

func newStageClock() *stageClock { return &stageClock{starts: map[string]stageStart{}} }

// advance records that the sandbox key moved to tr.To at `at` and returns the
// stage that ended and how long it took, if its start is known.
func (c *stageClock) advance(key string, tr transition, at time.Time) (stage string, took time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, known := c.starts[key]
	if known && !tr.New && prev.attempt == tr.Attempt && prev.stage == tr.From && !at.Before(prev.at) {
		stage, took, ok = prev.stage, at.Sub(prev.at), true
	}
	if upgrade.InProgress(tr.To) {
		c.starts[key] = stageStart{attempt: tr.Attempt, stage: tr.To, at: at}
	} else {
		delete(c.starts, key)
	}
	return stage, took, ok
}

// forget drops a deleted sandbox.
func (c *stageClock) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.starts, key)
}

// observeTransition records a written transition: the duration of the stage
// it ended and, for a failure, one count of its reason.
func (m *metrics) observeTransition(clock *stageClock, key string, tr transition, at time.Time) {
	if stage, took, ok := clock.advance(key, tr, at); ok {
		m.stageDuration.WithLabelValues(stage).Observe(took.Seconds())
	}
	if agentsv1alpha1.IsUpgradingFailedReason(tr.To) {
		m.failures.WithLabelValues(tr.To).Inc()
	}
}
