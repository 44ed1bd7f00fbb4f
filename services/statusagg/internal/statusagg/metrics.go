package statusagg

import (
	"fmt"
	"slices"
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
	queued        *prometheus.GaugeVec
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
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "molt", Name: "stages_queued_past_deadline",
			Help: "Sandboxes whose stage is past its deadline while its input event still waits at (or is being handled by) the service that handles it, so the watchdog leaves them alone, by stage; set at each watchdog check.",
		}, []string{"stage"}),
	}
	for _, c := range []prometheus.Collector{m.opsSandboxes, m.opsPhase, m.oldestStage, m.stageDuration, m.failures, m.redrives, m.queued} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register statusagg metrics: %w", err)
		}
	}
	// Each failure reason's series starts at 0: increase() sees nothing in a
	// series whose first sample is already 1, so without it the first failure
	// of a reason (after every start) would never fire MoltUpgradeFailures.
	for _, reason := range agentsv1alpha1.UpgradingFailedReasons {
		m.failures.WithLabelValues(reason)
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
//
// A sandbox's events of different types are handled concurrently, so a later
// stage's event can be decided before an earlier one's: posthook-done before
// pod-ready, which arrive within milliseconds. The status then moves from
// UpgradePod straight to Succeeded and pod-ready is skipped as stale, yet its
// time is when PostUpgrade began. The clock takes such a late event's time
// (late) and splits the jump at it, whichever of the two it learns first, so
// both stages are observed with their own durations.
type stageClock struct {
	mu     sync.Mutex
	starts map[string]stageStart // by sandbox key
}

// stageStart is where one sandbox's attempt stands: in stage since at.
type stageStart struct {
	attempt, stage string
	at             time.Time
	// late are stages past stage whose events were decided after a later
	// stage's, with when they began, waiting for the jump they split.
	late []stageMark
	// jumpTo and jumpAt are set when the attempt jumped from stage to jumpTo
	// at jumpAt over a stage whose event must still come (awaitsLate): stage's
	// duration is observed when it does.
	jumpTo string
	jumpAt time.Time
}

// stageMark is when an attempt's stage began.
type stageMark struct {
	stage string
	at    time.Time
}

// stageTime is one ended stage and how long it took.
type stageTime struct {
	stage string
	took  time.Duration
}

func newStageClock() *stageClock { return &stageClock{starts: map[string]stageStart{}} }

// awaitsLate says whether a jump from one reason to another skipped a stage
// whose event is certain to come: Succeeded (posthook-done) is always
// published in answer to pod-ready, which begins PostUpgrade.
func awaitsLate(from, to string) bool {
	return to == agentsv1alpha1.UpgradingReasonSucceeded && upgrade.Rank(from) < upgrade.Rank(agentsv1alpha1.UpgradingReasonPostUpgrade)
}

// advance records that the sandbox key moved to tr.To at `at` and returns the
// stages that ended and how long they took, those whose start is known. A
// jump over stages whose events came late is split at their times; one that
// awaits a late event (awaitsLate) is observed when it comes.
func (c *stageClock) advance(key string, tr transition, at time.Time) []stageTime {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, known := c.starts[key]
	if !known || tr.New || prev.jumpTo != "" || prev.attempt != tr.Attempt || prev.stage != tr.From || at.Before(prev.at) {
		c.moveTo(key, tr.Attempt, tr.To, at)
		return nil
	}
	if len(prev.late) == 0 && awaitsLate(tr.From, tr.To) {
		prev.jumpTo, prev.jumpAt = tr.To, at
		c.starts[key] = prev
		return nil
	}
	return c.chain(key, prev, prev.late, tr.To, at)
}

// late records that the event beginning stage of attempt, at `at`, was decided
// after a later stage's, and returns the stages that ended if it splits a jump
// already made.
func (c *stageClock) late(key, attempt, stage string, at time.Time) []stageTime {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, known := c.starts[key]
	if !known || prev.attempt != attempt || upgrade.Rank(stage) <= upgrade.Rank(prev.stage) || at.Before(prev.at) {
		return nil // a redelivery, or a stage this clock has already seen end
	}
	if prev.jumpTo == "" {
		for _, m := range prev.late {
			if m.stage == stage {
				return nil
			}
		}
		prev.late = append(prev.late, stageMark{stage: stage, at: at})
		c.starts[key] = prev
		return nil
	}
	return c.chain(key, prev, []stageMark{{stage: stage, at: at}}, prev.jumpTo, prev.jumpAt)
}

// chain ends prev's stage at the first of marks (ordered here by rank), each
// mark's at the next one, and the last at `at`, where the attempt moved to
// `to`. Marks of `to` or a later stage, marks after `at` and marks out of time
// order are dropped.
func (c *stageClock) chain(key string, prev stageStart, late []stageMark, to string, at time.Time) []stageTime {
	var marks []stageMark
	for _, m := range late {
		if upgrade.Rank(m.stage) < upgrade.Rank(to) && !m.at.After(at) {
			marks = append(marks, m)
		}
	}
	slices.SortFunc(marks, func(a, b stageMark) int { return upgrade.Rank(a.stage) - upgrade.Rank(b.stage) })
	var took []stageTime
	cur := stageMark{stage: prev.stage, at: prev.at}
	for _, m := range append(marks, stageMark{stage: to, at: at}) {
		if m.at.Before(cur.at) {
			continue
		}
		took = append(took, stageTime{stage: cur.stage, took: m.at.Sub(cur.at)})
		cur = m
	}
	c.moveTo(key, prev.attempt, to, at)
	return took
}

// moveTo records that the attempt is now in reason since at (forgotten once
// it has ended).
func (c *stageClock) moveTo(key, attempt, reason string, at time.Time) {
	if upgrade.InProgress(reason) {
		c.starts[key] = stageStart{attempt: attempt, stage: reason, at: at}
	} else {
		delete(c.starts, key)
	}
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
	m.observeStages(clock.advance(key, tr, at))
	if agentsv1alpha1.IsUpgradingFailedReason(tr.To) {
		m.failures.WithLabelValues(tr.To).Inc()
	}
}

// observeStages records the durations of ended stages.
func (m *metrics) observeStages(ended []stageTime) {
	for _, st := range ended {
		m.stageDuration.WithLabelValues(st.stage).Observe(st.took.Seconds())
	}
}
