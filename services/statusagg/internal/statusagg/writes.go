package statusagg

import (
	"encoding/json"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// Sandbox status writes go through one place, the sandbox controller's sync
// (syncSandbox), one sandbox at a time (the work queue never hands a key to
// two workers). The event handler does not write: it records an event's
// transition in the sandbox's entry below, asks for a write after the
// coalescing window, and waits until the write that carries the transition
// has succeeded before its message is acknowledged. So the transitions of a
// burst of events (requested, patched and prehook-done arrive within a few
// milliseconds when there is no hook) and the pod's changes of that moment
// leave in one status write, and a transition is acknowledged only once it
// is on the API server (rule 8: act, then ack).
//
// The entry also remembers the status our last write returned until the
// informer shows it, so a write never starts from a cache that lags our own
// write (statusagg is the only writer of a sandbox's status, DESIGN.md), and
// writes need neither a GET nor a resourceVersion: no conflict with the
// selector's label patch or the patcher's spec patch.

// sandboxWrites holds one entry per sandbox with a write in flight or a
// status not yet seen by the informer.
type sandboxWrites struct {
	mu sync.Mutex
	m  map[string]*sandboxEntry
	// inStage is when each sandbox's status was last written while one of
	// its attempts was in a stage. It outlives the entries, which are
	// dropped as soon as the informer shows a write, so that a pod change
	// seen after that still waits for the stage's next transition.
	inStage map[string]stageWrite
}

// stageWrite is one sandbox's last write while an attempt was in a stage.
type stageWrite struct {
	uid types.UID
	at  time.Time
}

// sandboxEntry is one sandbox's write state; mu is held while a transition is
// decided and while its status is written.
type sandboxEntry struct {
	mu  sync.Mutex
	uid types.UID
	// written is the status our last write returned, kept until the
	// informer's copy equals it or is at least as new (caughtUp), and
	// writtenVersion the resourceVersion that write returned.
	written        *agentsv1alpha1.SandboxStatus
	writtenVersion string
	// pending is the condition list with transitions decided but not yet
	// written (nil when none), and waiters the events waiting for it.
	pending []metav1.Condition
	waiters []*waiter
	// pendingSince is when pending was first set since the last write, and
	// urgent whether it holds an attempt's end (written at once).
	pendingSince time.Time
	urgent       bool
	// starts is whether pending holds an attempt's first transition, and
	// claim how the sandbox was claimed when that transition was decided.
	starts bool
	claim  *claimRead
}

// claimRead is an ops's claim on a sandbox as an attempt's start was decided
// against it: the ops label, and the claim annotation ("" when the sandbox
// has none). The write of that start tests both, so a start decided just
// before the selector released the sandbox (its ops deleted meanwhile, the
// template never patched) is not written after the release: the sandbox
// would show an upgrade that nothing drives, with no ops label to say whose.
type claimRead struct {
	ops        string
	annotation string
}

// waiter is one event's wait for the write that carries its transition.
type waiter struct {
	done chan struct{}
	// tr is the event's transition and at the event's time; the writer
	// records them (stage durations, Kubernetes Events) once written, in the
	// order the transitions were decided.
	tr transition
	at time.Time
	// At most one of: skip (why the transition was not written: the
	// sandbox is gone or was replaced) or err (the write failed; the event
	// is retried). Neither: it was written.
	skip string
	err  error
}

func newWaiter(tr transition, at time.Time) *waiter {
	return &waiter{done: make(chan struct{}), tr: tr, at: at}
}

// lock returns the entry of key, creating it, with its mu held. An entry
// forgotten while the caller waited for its mu is not returned: what is
// added to it would never be written.
func (w *sandboxWrites) lock(key string) *sandboxEntry {
	for {
		e := w.get(key)
		e.mu.Lock()
		w.mu.Lock()
		current := w.m[key] == e
		w.mu.Unlock()
		if current {
			return e
		}
		e.mu.Unlock()
	}
}

func (w *sandboxWrites) get(key string) *sandboxEntry {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*sandboxEntry{}
	}
	e, ok := w.m[key]
	if !ok {
		e = &sandboxEntry{}
		w.m[key] = e
	}
	return e
}

// wrote records a write of key's status (sandbox uid) at the time at: kept
// while an attempt is in a stage (inStage), dropped otherwise.
func (w *sandboxWrites) wrote(key string, uid types.UID, inStage bool, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !inStage {
		delete(w.inStage, key)
		return
	}
	if w.inStage == nil {
		w.inStage = map[string]stageWrite{}
	}
	w.inStage[key] = stageWrite{uid: uid, at: at}
}

// lastStageWrite is when sandbox uid's status was last written while an
// attempt was in a stage (zero when not, or not by this process).
func (w *sandboxWrites) lastStageWrite(key string, uid types.UID) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.inStage[key]; ok && r.uid == uid {
		return r.at
	}
	return time.Time{}
}

// moving says whether key has a transition decided but not yet written, or
// a write in flight: its attempt has made progress the cache cannot show yet,
// so the watchdog leaves it alone.
func (w *sandboxWrites) moving(key string) bool {
	w.mu.Lock()
	e := w.m[key]
	w.mu.Unlock()
	if e == nil {
		return false
	}
	if !e.mu.TryLock() {
		return true // a transition is being decided or written
	}
	defer e.mu.Unlock()
	return e.pending != nil
}

// conditionsNow are sb's conditions as this process has them now: with the
// transitions decided and not yet written, or its own last write where the
// cache does not show it yet. ok is false while a transition of key is being
// decided or written (not known yet).
func (w *sandboxWrites) conditionsNow(key string, sb *agentsv1alpha1.Sandbox) (conds []metav1.Condition, ok bool) {
	w.mu.Lock()
	e := w.m[key]
	w.mu.Unlock()
	if e == nil {
		return sb.Status.Conditions, true
	}
	if !e.mu.TryLock() {
		return nil, false
	}
	defer e.mu.Unlock()
	switch {
	case e.uid != sb.UID:
		return sb.Status.Conditions, true // an earlier sandbox of the name's
	case e.pending != nil:
		return e.pending, true
	}
	return e.status(&sb.Status).Conditions, true
}

// forget drops the entry of key once it holds nothing; the caller holds e.mu.
func (w *sandboxWrites) forget(key string, e *sandboxEntry) {
	if e.written != nil || e.pending != nil || len(e.waiters) > 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[key] == e {
		delete(w.m, key)
	}
}

// adopt points e at the sandbox uid; a replaced sandbox's state is dropped and
// its waiters released with skip.
func (e *sandboxEntry) adopt(uid types.UID) {
	if e.uid == uid {
		return
	}
	e.resolve("sandbox was replaced before its status was written", nil)
	e.uid, e.written, e.pending = uid, nil, nil
}

// caughtUp reports whether the informer's copy sb has caught up with our
// last write: it shows that very status with nothing pending, or it is at
// least as new as the write, whatever it shows. A status written over ours
// since (a statusagg replica that lost its lease and whose write landed
// late) is then what this process decides from, not our write for ever.
func (e *sandboxEntry) caughtUp(sb *agentsv1alpha1.Sandbox) bool {
	if e.written == nil {
		return false
	}
	if e.pending == nil && equality.Semantic.DeepEqual(sb.Status, *e.written) {
		return true
	}
	cmp, err := resourceversion.CompareResourceVersion(sb.ResourceVersion, e.writtenVersion)
	return err == nil && cmp >= 0
}

// status is the sandbox's status as this process knows it: the informer's,
// or our last write while the informer has not shown it yet.
func (e *sandboxEntry) status(cached *agentsv1alpha1.SandboxStatus) *agentsv1alpha1.SandboxStatus {
	if e.written != nil {
		return e.written
	}
	return cached
}

// resolve releases every waiter with one outcome and clears pending.
func (e *sandboxEntry) resolve(skip string, err error) {
	for _, w := range e.waiters {
		w.skip, w.err = skip, err
		close(w.done)
	}
	e.waiters, e.pending, e.urgent, e.starts, e.claim = nil, nil, false, false, nil
}

// podCatchUp bounds how long an attempt's success waits for the pod cache to
// show its pod Ready. The success follows pod-ready, which podcycler
// published when it saw the pod Ready, but statusagg's own pod watch can be
// behind it on a busy API server: written at once, the status would say
// Succeeded with the pod not Ready, and a second write would follow when the
// cache caught up.
const podCatchUp = time.Second

// awaitPod is how much longer an attempt's pending success waits for the
// pod cache (0: write now): only an attempt's end, only when want says
// Succeeded with Ready not True, and up to podCatchUp from the first pending
// transition.
func (e *sandboxEntry) awaitPod(want *agentsv1alpha1.SandboxStatus, now time.Time) time.Duration {
	if e.pending == nil || !e.urgent || upgradingReason(want) != agentsv1alpha1.UpgradingReasonSucceeded {
		return 0
	}
	if ready := meta.FindStatusCondition(want.Conditions, agentsv1alpha1.ConditionReady); ready != nil && ready.Status == metav1.ConditionTrue {
		return 0
	}
	return max(0, podCatchUp-now.Sub(e.pendingSince))
}

// awaitsPod says whether key's pending success waits for its pod (awaitPod),
// so a pod change is handed to the writer at once. A writer busy with the
// entry answers false; the pod change is then seen after its usual delay.
func (w *sandboxWrites) awaitsPod(key string) bool {
	w.mu.Lock()
	e := w.m[key]
	w.mu.Unlock()
	if e == nil || !e.mu.TryLock() {
		return false
	}
	defer e.mu.Unlock()
	return e.pending != nil && e.urgent
}

// addPending records conds as the pending transitions, with w waiting for
// their write; urgent when they end an attempt, starts when they begin one.
func (e *sandboxEntry) addPending(conds []metav1.Condition, w *waiter, urgent, starts bool, now time.Time) {
	if e.pending == nil {
		e.pendingSince = now
	}
	e.pending, e.urgent, e.starts = conds, e.urgent || urgent, e.starts || starts
	e.waiters = append(e.waiters, w)
}

// holdFor is how much longer the pending transitions wait for more changes
// before they are written (0: write now), from the first of them: none for
// an attempt's end, startWindow (if shorter) for its start, else window.
func (e *sandboxEntry) holdFor(window, startWindow time.Duration, now time.Time) time.Duration {
	if e.pending == nil || e.urgent {
		return 0
	}
	if e.starts {
		window = min(window, startWindow)
	}
	return max(0, window-now.Sub(e.pendingSince))
}

// statusPatch is a JSON patch that replaces the whole status, as an update of
// the status subresource would, without a resourceVersion. Its tests keep it
// from landing on a sandbox created again under the same name and, when it
// starts an ops's attempt (claim not nil), on a sandbox that ops no longer
// claims as it did.
func statusPatch(uid types.UID, st agentsv1alpha1.SandboxStatus, claim *claimRead) ([]byte, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	ops := []op{{Op: "test", Path: "/metadata/uid", Value: uid}}
	if claim != nil {
		ops = append(ops, op{Op: "test", Path: "/metadata/labels/" + upgrade.PointerToken(agentsv1alpha1.LabelUpdateOps), Value: claim.ops})
		if claim.annotation != "" {
			ops = append(ops, op{Op: "test", Path: "/metadata/annotations/" + upgrade.PointerToken(upgrade.AnnotationClaim), Value: claim.annotation})
		}
	}
	return json.Marshal(append(ops, op{Op: "add", Path: "/status", Value: st}))
}
