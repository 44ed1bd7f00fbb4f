package statusagg

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// outcome is what recording one event did: either a skip reason, or the
// transition written and the sandbox as written. cacheSkip marks a skip that
// rests on the informer's copy of the sandbox's metadata (gone, replaced,
// not claimed by the event's ops), which may lag; a skip decided against the
// status statusagg itself wrote does not.
type outcome struct {
	skip      string
	cacheSkip bool
	tr        transition
}

// handleEvent records one upgrade event on its sandbox:
//  1. decode (done by events.Consume) and decide its transition against the
//     sandbox's status as statusagg knows it (writes.go), reading the
//     sandbox from the cache first and from the API server when the cache's
//     metadata says "skip" (it may lag behind the selector's label);
//  2. act: hand the transition to the sandbox's writer and wait until the
//     status write that carries it has succeeded (the message is
//     acknowledged only then);
//  3. record: stage duration and failure metrics, and a Kubernetes Event
//     for an attempt's start, success or failure — done by the writer once
//     the write succeeded, in the order the transitions were decided
//     (recordWritten), since one write may carry several events' transitions
//     and their handlers wake in any order;
//  4. enqueue the namespace's ops, whose counters may have moved (soon for
//     an attempt's start or end, at the ops interval's pace otherwise).
//
// A re-drive (the watchdog's, events.Event.Redriven) is not recorded: it stands
// for an input of a stage the status already shows, so it would change nothing,
// and one published by someone else with statusagg's NATS password must not move
// a sandbox on, as the consumers check the status before they act on one
// (upgrade.RedriveRefusal).
func (s *server) handleEvent(ctx context.Context, msg *events.Message) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("stage", msg.Event.Data.Stage))
	if msg.Event.Redriven {
		klog.FromContext(ctx).V(2).Info("Skip event: a re-drive is not recorded in status", "type", msg.Event.Type, "redrive", msg.Event.Data.Redrive)
		return nil
	}
	return s.apply(ctx, msg.Event)
}

// apply records ev as handleEvent does; the watchdog calls it directly with
// the failure it decides, so a stalled attempt ends even without a stream.
func (s *server) apply(ctx context.Context, ev events.Event) error {
	logger := klog.FromContext(ctx)
	out, w, err := s.stage(ctx, ev, false)
	if err == nil && out.cacheSkip {
		out, w, err = s.stage(ctx, ev, true) // the cache may lag: confirm the skip against the API server
	}
	if err != nil {
		return fmt.Errorf("record event on sandbox %s: %w", ev.SandboxKey(), err)
	}
	if w != nil {
		select {
		case <-w.done:
		case <-ctx.Done():
			return fmt.Errorf("record event on sandbox %s: %w", ev.SandboxKey(), ctx.Err())
		}
		if w.err != nil {
			return fmt.Errorf("record event on sandbox %s: %w", ev.SandboxKey(), w.err)
		}
		out.skip = w.skip
	}
	if out.skip != "" {
		logger.V(2).Info("Skip event", "why", out.skip)
		return nil
	}
	logger.V(2).Info("Recorded upgrade stage", "from", out.tr.From, "to", out.tr.To, "newAttempt", out.tr.New)
	// An attempt's start or end moves its ops's counters; a stage moving on
	// does not. Only a failure, or a success near the ops's end, may change
	// the ops's phase (recountOpsOf).
	if tr := out.tr; tr.New || upgrade.Terminal(tr.To) {
		if tr.New && ev.Data.Ops.Name != "" {
			s.opsTails.started(ev.Data.Sandbox.Namespace + "/" + ev.Data.Ops.Name)
		}
		s.recountOpsOf(ev.Data.Sandbox.Namespace, agentsv1alpha1.IsUpgradingFailedReason(tr.To))
	} else {
		s.enqueueOpsOf(ev.Data.Sandbox.Namespace, after(s.quietRecount()))
	}
	return nil
}

// stage decides the event's transition against the sandbox's known status
// (with the transitions still pending) and adds it to the pending ones, with
// a waiter for the write that will carry it; it returns a skip reason when
// the event changes nothing.
//
// The sandbox is read only once the entry's lock is held. Read before, a
// cached copy could predate a write that has since been made and seen by
// the informer (and so dropped from the entry): the event would be decided
// against a status older than the one on the server, and could begin its
// attempt again over a Succeeded one and move the sandbox back.
func (s *server) stage(ctx context.Context, ev events.Event, fresh bool) (outcome, *waiter, error) {
	d := ev.Data
	key := ev.SandboxKey()
	e := s.writes.lock(key)
	defer e.mu.Unlock()
	defer s.writes.forget(key, e)
	sb, err := s.loadSandbox(ctx, d.Sandbox.Namespace, d.Sandbox.Name, fresh)
	switch {
	case err != nil:
		return outcome{}, nil, err
	case sb == nil:
		return outcome{skip: "sandbox is gone", cacheSkip: !fresh}, nil, nil
	case sb.UID != d.Sandbox.UID:
		return outcome{skip: fmt.Sprintf("sandbox was replaced (uid %s, event for %s)", sb.UID, d.Sandbox.UID), cacheSkip: !fresh}, nil, nil
	}
	if claimed := sb.Labels[agentsv1alpha1.LabelUpdateOps]; claimed != d.Ops.Name &&
		// Its label removed while the attempt is in a stage: still the
		// ops's (the selector puts the label back).
		!(d.Ops.Name != "" && upgrade.LostLabelMidAttempt(sb, d.Ops.Name, types.UID(d.Attempt))) &&
		!ofDirectAttemptInStage(ev, sb) {
		// A direct attempt's event too: the selector removes a finished
		// ops's label before it starts one, so an ops claimed the sandbox
		// since, and drives it now.
		return outcome{skip: fmt.Sprintf("sandbox is claimed by ops %q, not %q", claimed, d.Ops.Name), cacheSkip: !fresh}, nil, nil
	}

	e.adopt(sb.UID)
	// A fresh read serves its labels: our last write is never older than it.
	// The view is a shallow copy, only read: the status's conditions are
	// cloned below before a transition is recorded on them.
	view := *sb
	view.Status = *e.status(&sb.Status)
	if e.pending != nil {
		view.Status.Conditions = e.pending
	}
	if d.Ops.Name != "" {
		// An event of an ops deleted and created again under the same name is stale,
		// except the failure of the attempt the sandbox is in: nothing drives that
		// attempt any more (the watchdog fails it so), and dropped, the sandbox would
		// stay in its stage and the new ops would wait for it for ever.
		ending := ev.Type == events.TypeFailed && d.Attempt == upgrade.CurrentAttempt(&view)
		if ops, err := s.ops.SandboxUpdateOps(sb.Namespace).Get(d.Ops.Name); err == nil && ops.UID != d.Ops.UID && !ending {
			return outcome{skip: fmt.Sprintf("ops %s was replaced (uid %s, event for %s)", d.Ops.Name, ops.UID, d.Ops.UID), cacheSkip: !fresh}, nil, nil
		}
	}
	if d.Ops.Name == "" && d.Attempt != upgrade.CurrentAttempt(&view) && !upgrade.ClaimedBy(&view, "", d.Attempt) {
		// An old direct attempt's message replayed after a later attempt
		// (a consumer created again): it must not start over.
		return outcome{skip: fmt.Sprintf("direct attempt %s is superseded (status records %q)", d.Attempt, upgrade.CurrentAttempt(&view)), cacheSkip: !fresh}, nil, nil
	}
	target, err := stageOf(ev, &view)
	if err != nil {
		return outcome{}, nil, events.Permanent(fmt.Errorf("map event to a stage: %w", err))
	}
	attempt := upgrade.CurrentAttempt(&view)
	curReason, _ := upgrade.ReasonFor(&view, attempt)
	tr, skip := decide(attempt, curReason, ev, target)
	if skip == "" && tr.To == agentsv1alpha1.UpgradingReasonUpgradePodFailed {
		tr.Message = checkpointKeptMessage(tr, &view, s.podOf(sb))
	}
	if skip != "" && directAhead(ev, attempt) {
		// A later event of a newer direct attempt than the status records: its
		// requested is not recorded yet (a backlog, a failover). Skipped, the
		// attempt would wait at its first stage for the watchdog.
		if !fresh {
			return outcome{skip: skip, cacheSkip: true}, nil, nil
		}
		return outcome{}, nil, events.Retry(fmt.Errorf("%s of direct attempt %s came before the attempt's requested was recorded (status records %q)", ev.Type, ev.Data.Attempt, attempt), directAheadRetry)
	}
	if skip != "" {
		if ev.Type == events.TypePreHookDone && ev.Data.Message != "" && ev.Data.Attempt == attempt && agentsv1alpha1.IsUpgradingFailedReason(curReason) {
			// preUpgrade ended with a note after its attempt's failure was
			// recorded (the watchdog's deadline came first): the note, its
			// stderr, still says what the backup did.
			s.announce(sb, transition{Attempt: attempt, Note: ev.Data.Message})
		}
		if ev.Data.Attempt == attempt && upgrade.InProgress(target) {
			// Perhaps decided after a later stage's event (see stageClock):
			// its time still tells when its stage began.
			s.metrics.observeStages(s.clock.late(key, attempt, target, ev.Time))
		}
		return outcome{skip: skip}, nil, nil
	}
	conds := slices.Clone(view.Status.Conditions)
	recordTransition(&conds, tr, sb.Generation, metav1.Now())
	if equality.Semantic.DeepEqual(conds, view.Status.Conditions) {
		return outcome{skip: "status already records " + tr.To}, nil, nil
	}
	w := newWaiter(tr, ev.Time)
	e.addPending(conds, w, upgrade.Terminal(tr.To), tr.New, time.Now())
	if tr.New && d.Ops.Name != "" {
		e.claim = &claimRead{ops: d.Ops.Name, annotation: sb.Annotations[upgrade.AnnotationClaim]}
	}
	if hold := e.holdFor(s.coalesce, s.startWindow, time.Now()); hold > 0 {
		s.sandboxCtl.EnqueueAfter(key, hold)
	} else {
		// The attempt's end frees budget for the next sandbox and no
		// later event of it is coming: written at once.
		s.sandboxCtl.EnqueueKey(key)
	}
	return outcome{tr: tr}, w, nil
}

// loadSandbox reads the sandbox from the informer cache, or from the API
// server when fresh; nil when it does not exist.
func (s *server) loadSandbox(ctx context.Context, ns, name string, fresh bool) (*agentsv1alpha1.Sandbox, error) {
	var sb *agentsv1alpha1.Sandbox
	var err error
	if fresh {
		sb, err = s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
	} else {
		sb, err = s.sandboxes.Sandboxes(ns).Get(name)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %s/%s: %w", ns, name, err)
	}
	return sb, nil
}

// recordWritten records the transitions of the waiters just written on sb:
// the stage each ended (its duration), failures, and the Kubernetes Events,
// in the order they were decided. Called by the writer with the entry held.
func (s *server) recordWritten(key string, sb *agentsv1alpha1.Sandbox, waiters []*waiter) {
	for _, w := range waiters {
		s.metrics.observeTransition(s.clock, key, w.tr, w.at)
		s.announce(sb, w.tr)
	}
}

// announce records the Kubernetes Event of a written transition: the start
// of an attempt, its success or its failure.
func (s *server) announce(sb *agentsv1alpha1.Sandbox, tr transition) {
	by := "a direct upgrade (spec.upgradePolicy)"
	if !strings.HasPrefix(tr.Attempt, upgrade.DirectAttemptPrefix) {
		// An ops's attempt (its uid), whose label (and claim) may have been
		// taken off mid-attempt, until the selector puts them back.
		by = "the SandboxUpdateOps with uid " + tr.Attempt
		if ops := sb.Labels[agentsv1alpha1.LabelUpdateOps]; ops != "" {
			by = "SandboxUpdateOps " + ops
		} else if ops, _ := upgrade.ClaimOf(sb); ops != "" {
			by = "SandboxUpdateOps " + ops
		}
	}
	switch {
	case tr.New && tr.Resumes != "":
		// The patcher decides where it goes on (upgrade.ResumeAt), after
		// this: the Event does not name a stage it may not run.
		s.recorder.Eventf(sb, corev1.EventTypeNormal, EventUpgradeStarted, "upgrade by %s started (attempt %s), resuming the one that ended in %s: it goes on from that step (kubectl molt history shows the stages it runs)", by, tr.Attempt, tr.Resumes)
	case tr.New:
		s.recorder.Eventf(sb, corev1.EventTypeNormal, EventUpgradeStarted, "upgrade by %s started at %s (attempt %s)", by, tr.To, tr.Attempt)
	}
	switch {
	case agentsv1alpha1.IsUpgradingFailedReason(tr.To):
		// The failed reason is the Event's reason, as upstream's, so alerts on
		// reason=UpgradePodFailed keep working.
		msg := failureEventMessage(sb, tr)
		if ops, err := s.ops.SandboxUpdateOps(sb.Namespace).Get(sb.Labels[agentsv1alpha1.LabelUpdateOps]); err == nil && ops.DeletionTimestamp != nil && !strings.HasPrefix(tr.Attempt, upgrade.DirectAttemptPrefix) {
			// `kubectl molt retry` of an ops being deleted finds nothing.
			msg = failureWithNextStepOf(tr.Message, opsDeletedNextStep(ops.Name))
		}
		s.recorder.Eventf(sb, corev1.EventTypeWarning, tr.To, "upgrade by %s failed in %s: %s", by, upgrade.StageOfFailure(tr.To), msg)
	case tr.To == agentsv1alpha1.UpgradingReasonSucceeded:
		s.recorder.Eventf(sb, corev1.EventTypeNormal, EventUpgradeSucceeded, "upgrade by %s succeeded (attempt %s)", by, tr.Attempt)
		if edited := templateEditedUnder(sb, s.podOf(sb), tr.Attempt); edited != "" {
			s.recorder.Eventf(sb, corev1.EventTypeWarning, EventTemplateEditedDuringUpgrade, "upgrade by %s (attempt %s): %s", by, tr.Attempt, edited)
		}
	}
	if tr.Note != "" {
		s.recorder.Eventf(sb, corev1.EventTypeWarning, EventPreUpgradeNote, "upgrade by %s (attempt %s): %s", by, tr.Attempt, tr.Note)
	}
}

// templateEditedUnder says, for an ops's attempt that succeeded on sb, that
// spec.template was changed after the attempt built pod from the patched
// one: without spec.upgradePolicy nothing rolls the edit out until the pod
// is next made, with no hooks, and the sandbox's status says Succeeded. ""
// when the pod runs the template, or the sandbox upgrades itself (its
// direct loop rolls the edit out).
func templateEditedUnder(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod, attempt string) string {
	if strings.HasPrefix(attempt, upgrade.DirectAttemptPrefix) || sb.Spec.UpgradePolicy != nil || !upgrade.BuiltBy(pod, attempt) {
		return ""
	}
	built := pod.Labels[agentsv1alpha1.LabelPodTemplateHash]
	now, err := upgrade.Revision(sb.Spec.Template)
	if err != nil || built == "" || built == now {
		return ""
	}
	return fmt.Sprintf("spec.template was changed while the upgrade ran (now revision %s); pod %s runs revision %s, the one the upgrade built, and the edit applies only to the sandbox's next pod, with no hooks: to roll it out now with a backup, set spec.template back and apply the change as a SandboxUpdateOps (`kubectl molt plan -f FILE` shows it), or set spec.upgradePolicy.type Recreate with spec.lifecycle hooks so the sandbox upgrades itself to it",
		now, pod.Name, built)
}

// failureEventMessage is a failed transition's message for its Warning
// Event: the stage's words with what to do next (failureWithNextStep).
func failureEventMessage(sb *agentsv1alpha1.Sandbox, tr transition) string {
	return failureWithNextStep(sb, tr.Attempt, tr.Message)
}

// ofDirectAttemptInStage reports whether ev is an event of the direct
// attempt sb's status shows in a stage. It is recorded whatever ops label sb
// carries: one added by hand mid-attempt makes every stage leave sb to that
// ops, and dropped, the attempt's report of a stage it did finish (a restore
// already done) or its failure (the watchdog's, as nothing drives it any
// more) would leave sb in its stage for ever. An ops admits no sandbox whose
// direct attempt is in a stage (upgrade.Select), so no ops attempt is
// overwritten; decide moves the attempt only forward.
func ofDirectAttemptInStage(ev events.Event, sb *agentsv1alpha1.Sandbox) bool {
	if ev.Data.Ops.Name != "" || !strings.HasPrefix(ev.Data.Attempt, upgrade.DirectAttemptPrefix) ||
		ev.Data.Attempt != upgrade.CurrentAttempt(sb) {
		return false
	}
	reason, _ := upgrade.ReasonFor(sb, ev.Data.Attempt)
	return upgrade.InProgress(reason)
}
