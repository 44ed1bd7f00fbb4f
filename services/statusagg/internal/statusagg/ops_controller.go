package statusagg

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// syncOps recomputes one SandboxUpdateOps' status:
//  1. load the ops (gone → drop its metrics and what is remembered of it);
//  2. skip a finished ops (Completed or Failed: its counters are frozen,
//     its sandboxes move on) and one being deleted, keeping their gauges;
//     one being deleted says which sandboxes its deletion waits for
//     (sayWhyDeletionWaits);
//  3. select the namespace's sandboxes (upgrade.Select) and find the active
//     ops; an empty selection is confirmed against the API server before the
//     ops completes with nothing to update (the cache may not hold sandboxes
//     created just before the ops);
//  4. recompute the status (desiredOpsStatus), write it if it changed: at
//     once when its phase changes, else at most every opsInterval;
//  5. record: gauges, and an Event when the write changed the phase.
func (s *server) syncOps(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("split key %q: %w", key, err)
	}
	logger := klog.FromContext(ctx).WithValues("ops", klog.KRef(ns, name))
	ops, err := s.ops.SandboxUpdateOps(ns).Get(name)
	if apierrors.IsNotFound(err) {
		s.metrics.forgetOps(ns, name)
		s.opsWrites.forget(key)
		s.opsTails.forget(key)
		s.deleted.forget(key)
		s.releases.forget(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get ops %s: %w", key, err)
	}
	if upgrade.IsFinished(ops) || ops.DeletionTimestamp != nil {
		logger.V(4).Info("Skip: ops is finished or being deleted", "phase", ops.Status.Phase)
		s.metrics.setOps(ops, ops.Status)
		sandboxes, _ := s.sandboxes.Sandboxes(ns).List(labels.Everything()) // a deleted ops's attempts finish
		s.metrics.setOldestStage(ops, sandboxes)
		if ops.DeletionTimestamp != nil {
			return s.sayWhyDeletionWaits(ctx, ops, sandboxes)
		}
		return s.observeFinishedEdit(ctx, ops)
	}

	all, err := s.ops.SandboxUpdateOps(ns).List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list ops of namespace %s: %w", ns, err)
	}
	sandboxes, err := s.sandboxes.Sandboxes(ns).List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list sandboxes of namespace %s: %w", ns, err)
	}
	s.metrics.setOldestStage(ops, sandboxes)
	otherActive := upgrade.OtherActive(all, name)
	sel, selErr := upgrade.Select(ops, sandboxes, otherActive)
	if selErr == nil && sel.Total() == 0 {
		if sandboxes, err = s.listSandboxes(ctx, ns); err != nil {
			return err
		}
		sel, selErr = upgrade.Select(ops, sandboxes, otherActive)
	}
	if selErr == nil {
		s.opsTails.set(key, sel)
	} else {
		s.opsTails.forget(key)
	}
	sel.PodOf = s.podOf
	want := desiredOpsStatus(ops, upgrade.ActiveOps(all), sel, selErr)
	if selErr == nil && sel.Total() > 0 && upgrade.FinalPhase(want.Phase) && !upgrade.IsFinished(ops) {
		// An end is for good: decided on the API server's sandboxes, not a
		// cache that may not show one the selector has just admitted (a
		// sandbox created, or maxUnavailable raised, since).
		if sandboxes, err = s.listSandboxes(ctx, ns); err != nil {
			return err
		}
		if sel, selErr = upgrade.Select(ops, sandboxes, otherActive); selErr == nil {
			s.opsTails.set(key, sel)
		}
		sel.PodOf = s.podOf
		want = desiredOpsStatus(ops, upgrade.ActiveOps(all), sel, selErr)
	}
	if selErr == nil && want.Phase == agentsv1alpha1.SandboxUpdateOpsCompleted && !upgrade.IsFinished(ops) {
		// A Completed ops is final: not while sandboxes it may upgrade
		// are still starting (created with it, in one apply).
		if phases, n, wait := upgrade.Starting(ops, sel, time.Now(), s.working); n > 0 {
			want = waitForStarting(ops, want, sel, n, phases)
			s.opsCtl.EnqueueAfter(key, wait)
		}
	}
	notes := s.deleted.peek(key, ops.UID)
	withDeletedNotes(&want, notes, ops.Generation)
	outage, down := s.stream.down()
	withStreamOutage(&want, outage, down, ops.Generation)
	withStalls(&want, s.stalls.of(key), ops.Generation)
	if equality.Semantic.DeepEqual(ops.Status, want) {
		s.deleted.drop(key, ops.UID, notes)
		s.metrics.setOps(ops, want)
		return nil
	}
	if wait := s.opsWrites.wait(key, s.opsInterval); wait > 0 && announced(ops.Status) == announced(want) && ops.Status.Phase == want.Phase {
		// Counters only: written at most every opsInterval; a phase change goes at once.
		s.metrics.setOps(ops, want)
		s.opsCtl.EnqueueAfter(key, wait)
		return nil
	}
	upd := ops.DeepCopy()
	upd.Status = want
	written, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		logger.V(4).Info("Skip status write: the ops changed meanwhile", "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("update status of ops %s: %w", key, err)
	}
	s.deleted.drop(key, ops.UID, notes)
	s.opsWrites.wrote(key)
	logger.V(2).Info("Updated ops status", "phase", want.Phase, "total", want.Replicas,
		"updated", want.UpdatedReplicas, "updating", want.UpdatingReplicas, "failed", want.FailedReplicas)
	s.metrics.setOps(written, want)
	if announced(ops.Status) != announced(want) {
		if eventType, reason := opsPhaseEvent(want); reason != "" {
			s.recorder.Event(written, eventType, reason, opsMessage(want))
		}
	}
	progressing := meta.FindStatusCondition(want.Conditions, agentsv1alpha1.ConditionProgressing)
	if progressing != nil && agentsv1alpha1.IsSelectorPauseReason(progressing.Reason) {
		if was := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionProgressing); was == nil || was.Reason != progressing.Reason {
			s.recorder.Event(written, corev1.EventTypeWarning, progressing.Reason, progressing.Message)
		}
	}
	for _, warning := range []string{agentsv1alpha1.ConditionPatchAddsContainers, agentsv1alpha1.ConditionPostUpgradeWithoutBackup, agentsv1alpha1.ConditionBackupNotOnVolume, agentsv1alpha1.ConditionClaimRefused, agentsv1alpha1.ConditionEventStreamUnavailable, agentsv1alpha1.ConditionStagesStalled} {
		if progressing != nil && progressing.Reason == warning {
			continue // the pause's Event above says it, and how to go on
		}
		if c := meta.FindStatusCondition(want.Conditions, warning); c != nil && meta.FindStatusCondition(ops.Status.Conditions, warning) == nil {
			s.recorder.Event(written, corev1.EventTypeWarning, warning, c.Message)
		}
	}
	return nil
}

// listSandboxes reads a namespace's sandboxes from the API server.
func (s *server) listSandboxes(ctx context.Context, ns string) ([]*agentsv1alpha1.Sandbox, error) {
	list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes of namespace %s: %w", ns, err)
	}
	out := make([]*agentsv1alpha1.Sandbox, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// announced is what an ops Event announces: its phase, and for Pending
// whether it waits or its spec is invalid.
func announced(st agentsv1alpha1.SandboxUpdateOpsStatus) string {
	_, reason := opsPhaseEvent(st)
	return string(st.Phase) + "/" + reason
}

// opsMessage is the message of the condition that explains the phase.
func opsMessage(st agentsv1alpha1.SandboxUpdateOpsStatus) string {
	for _, t := range []string{agentsv1alpha1.ConditionInvalidPatch, agentsv1alpha1.ConditionFailureBudgetExhausted, agentsv1alpha1.ConditionWaitingForNamespace} {
		if c := meta.FindStatusCondition(st.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return c.Message
		}
	}
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionProgressing); c != nil {
		return c.Message
	}
	return string(st.Phase)
}

// opsRecountDelay is how long an ops's recount waits for more of its
// sandboxes' changes: an ops is recounted once per burst of them, not once
// per change (each recount reads every sandbox of the namespace), and its
// end is seen well within a second of the last sandbox's. A change that
// cannot move the counters (upgrade.CountsMayChange: a stage moving on, a
// pod or spec change) waits for the ops interval instead, the pace at which
// counters are written anyway.
const opsRecountDelay = 200 * time.Millisecond

// enqueueOpsOf enqueues every ops of a namespace, each after delay(ops).
func (s *server) enqueueOpsOf(ns string, delay func(*agentsv1alpha1.SandboxUpdateOps) time.Duration) {
	list, err := s.ops.SandboxUpdateOps(ns).List(labels.Everything())
	if err != nil {
		return
	}
	for _, o := range list {
		s.opsCtl.EnqueueAfter(o.Namespace+"/"+o.Name, delay(o))
	}
}

// after is a delay of enqueueOpsOf that is d for every ops.
func after(d time.Duration) func(*agentsv1alpha1.SandboxUpdateOps) time.Duration {
	return func(*agentsv1alpha1.SandboxUpdateOps) time.Duration { return d }
}

// recountOpsOf enqueues every ops of a namespace for a sandbox change that
// moves counters: after opsRecountDelay where the change may also change
// the ops's phase, else after quietRecount, the pace at which counters are
// written anyway. The phase can change when the change is urgent (a
// failure, a deletion, a label change: any change but an attempt's start or
// success), when the ops is paused (its sandboxes in flight are its last
// for now), not running yet or not known, or when the
// sandboxes it has yet to start fit in one more round of its budget
// (opsTails.mayEnd: its last sandbox's success completes it). A success
// while more sandboxes wait cannot finish the ops, and at 20 namespaces of
// 500 sandboxes the recounts of every start and success, each reading the
// whole namespace, were a cost per sandbox that grew with the run's length.
func (s *server) recountOpsOf(ns string, urgent bool) {
	s.enqueueOpsOf(ns, func(o *agentsv1alpha1.SandboxUpdateOps) time.Duration { return s.recountDelay(o, urgent) })
}

// recountDelay is recountOpsOf's delay for one ops.
func (s *server) recountDelay(o *agentsv1alpha1.SandboxUpdateOps, urgent bool) time.Duration {
	if urgent || o.Spec.Paused || o.Status.Phase != agentsv1alpha1.SandboxUpdateOpsUpdating || s.opsTails.mayEnd(o.Namespace+"/"+o.Name) {
		return opsRecountDelay
	}
	return s.quietRecount()
}

// quietRecount is the delay of a recount for a change that cannot move an
// ops's counters: the ops interval, or opsRecountDelay if that is longer.
func (s *server) quietRecount() time.Duration { return max(s.opsInterval, opsRecountDelay) }

// opsTails remembers, per ops, how many sandboxes its last recount found
// not started, less the attempts that started since, and its budget.
type opsTails struct {
	mu sync.Mutex
	m  map[string]opsTail
}

type opsTail struct{ notStarted, maxUnavailable int }

// mayEnd is true once the sandboxes left to start fit in one more round of
// the budget: from then on any success may be the ops's last (a round
// lasts at least one pod's recreation, and a recount comes within the ops
// interval). An ops not recounted since this process started may end.
func (t *opsTails) mayEnd(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	tail, ok := t.m[key]
	return !ok || tail.notStarted <= tail.maxUnavailable
}

// set records a recount of key's ops.
func (t *opsTails) set(key string, sel upgrade.Selection) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]opsTail{}
	}
	t.m[key] = opsTail{notStarted: sel.NotStarted, maxUnavailable: sel.MaxUnavailable}
}

// started counts an attempt of key's ops that started after its last
// recount. A resumed sandbox was not among the not started: counting it
// only brings the tail nearer, which costs a recount, never a late one.
func (t *opsTails) started(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tail, ok := t.m[key]; ok {
		tail.notStarted--
		t.m[key] = tail
	}
}

func (t *opsTails) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, key)
}

// opsWriteTimes remembers when each ops's status was last written.
type opsWriteTimes struct {
	mu sync.Mutex
	m  map[string]time.Time
}

// wait is how long until key's status may be written again, given interval.
func (o *opsWriteTimes) wait(key string, interval time.Duration) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return interval - time.Since(o.m[key])
}

func (o *opsWriteTimes) wrote(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]time.Time{}
	}
	o.m[key] = time.Now()
}

func (o *opsWriteTimes) forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, key)
}

// namespaceHandler enqueues every ops of the namespace of any changed object
// (a sandbox moves an ops' counters; an ops finishing frees the namespace);
// a sandbox's change that cannot move them waits for quietRecount.
func (s *server) namespaceHandler() cache.ResourceEventHandler {
	enqueue := func(obj any, delay time.Duration) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if m, err := meta.Accessor(obj); err == nil {
			s.enqueueOpsOf(m.GetNamespace(), after(delay))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { enqueue(obj, opsRecountDelay) },
		UpdateFunc: func(oldObj, obj any) {
			old, ok1 := oldObj.(*agentsv1alpha1.Sandbox)
			cur, ok2 := obj.(*agentsv1alpha1.Sandbox)
			switch {
			case !ok1 || !ok2:
				enqueue(obj, opsRecountDelay)
			case !upgrade.CountsMayChange(old, cur):
				enqueue(obj, s.quietRecount())
			default:
				s.recountOpsOf(cur.Namespace, !upgrade.TakesBudgetOnly(old, cur) && !upgrade.SucceededOnly(old, cur))
			}
		},
		DeleteFunc: func(obj any) { enqueue(obj, opsRecountDelay) },
	}
}

// observeFinishedEdit records, on a finished ops edited since (an edit changes nothing:
// it is final), that statusagg has seen its generation: tools that judge health by
// status.observedGeneration (kstatus, Argo CD, kubectl wait) would otherwise take it for
// in progress for ever.
func (s *server) observeFinishedEdit(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps) error {
	if ops.Status.ObservedGeneration == ops.Generation {
		return nil
	}
	updated := ops.DeepCopy()
	updated.Status.ObservedGeneration = ops.Generation
	_, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("record observedGeneration %d of the finished ops %s/%s: %w", ops.Generation, ops.Namespace, ops.Name, err)
	}
	return nil
}
