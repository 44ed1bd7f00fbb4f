package statusagg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// Deadlines is what the watchdog allows each stage before it calls it stalled.
type Deadlines struct {
	// Patch bounds the patcher's part of PreUpgrade (flag --patch-timeout).
	Patch time.Duration
	// HookMargin is added to a hook's timeoutSeconds (flag --hook-margin), and to the pod
	// readiness timeout.
	HookMargin time.Duration
	// PodReady is podcycler's --pod-ready-timeout (flag --pod-ready-timeout, same value).
	PodReady time.Duration
	// Redrives is how many times a stalled stage is re-driven before it fails (flag
	// --redrives).
	Redrives int
	// Interval is how often the watchdog looks (flag --watchdog-interval).
	Interval time.Duration
}

// watchdog finds attempts whose stage has made no progress past its deadline and re-drives
// or fails them, from the state in Kubernetes alone (rule 10: a lost message is a delay,
// never a hang). It runs in the leader only.
type watchdog struct {
	s   *server
	cfg Deadlines
	pub *events.Publisher
	now func() time.Time
	// queues, if set, tells a stage whose input still waits at its consumer from a stalled
	// one (queue.go).
	queues *queues

	mu sync.Mutex
	// driven is what this process re-drove, by (sandbox, attempt, stage). It lives only in
	// memory: a new leader (or a restarted or resumed one) starts at zero and re-drives
	// every stalled stage again before it fails any, so a stage is never failed for a time
	// no watchdog was looking, nor before its input was actually re-published.
	driven map[string]drives
	// watching is when this process began to watch (as leader): giveUpAfter counts from
	// it at the earliest.
	watching time.Time
	// queuedSeen is, by driveKey, when a check last found the stage's input queued and
	// not yet delivered: giveUpAfter counts from it at the earliest, as time in a queue
	// is not a stall.
	queuedSeen map[string]time.Time
	// lastWhere is, by driveKey, where a check last found the stage's input
	// waiting (queued or in flight at a consumer): the failure names it, so a
	// service that takes nothing (stopped, or not reaching NATS) is named.
	lastWhere map[string]string
	// busWarned is, by the object a Warning Event StreamUnreachable went to
	// (the ops, or the sandbox of a direct attempt), when it last went.
	busWarned map[types.UID]time.Time
}

// drives is how many times a stage was re-driven, the last at last.
type drives struct {
	n    int
	last time.Time
}

// Watchdog verdicts on a stage in progress.
const (
	verdictWait    = iota // within its deadline, or of the last re-drive
	verdictRedrive        // re-drive it (once more)
	verdictFail           // re-driven as often as allowed, a deadline ago: fail it
	verdictGiveUp         // watched for giveUpAfter deadlines without progress: fail it, re-driven or not
)

// giveUpAfter is how many deadlines, beyond the re-drives', a stage may stay without
// progress under this process's watch before it is failed even though its re-drives could
// not be published, or whether its input is still queued could not be told (NATS
// unreachable, a permission refused): every stage ends (rule 10), and a brief NATS error
// never fails one that is only queued.
const giveUpAfter = 3

// judge decides what the watchdog does with a stage entered at entered, of deadline d,
// that this process re-drove as done says, allowing redrives re-drives. The stage waits a
// deadline from entering, and again from each re-drive; it is failed only after the last
// re-drive's deadline passed. Time before a re-drive of this process counts once at most,
// so a new leader that finds a stage entered long ago re-drives it first (its input may
// have sat with the old leader) and never fails it at once.
//
// Two rules bound that: uncertain says whether the stage's input is still queued could
// not be told in this check, and such a stage is not failed then (at most re-driven); and
// a stage without progress for redrives+giveUpAfter deadlines of this process's watch
// (watching is when it began, a new leader's start) is given up on whatever the re-drive
// count, which does not move while re-drives cannot be published.
func judge(now, entered time.Time, d time.Duration, done drives, redrives int, watching time.Time, uncertain bool) int {
	watched := entered
	if watching.After(watched) {
		watched = watching
	}
	if now.Sub(watched) >= time.Duration(redrives+giveUpAfter)*d {
		return verdictGiveUp
	}
	since := entered
	if done.n > 0 {
		since = done.last
	}
	switch {
	case now.Sub(since) < d:
		return verdictWait
	case done.n < redrives:
		return verdictRedrive
	case uncertain:
		return verdictWait
	default:
		return verdictFail
	}
}

// run checks every Interval until ctx ends.
func (w *watchdog) run(ctx context.Context) error {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.check(ctx)
		}
	}
}

// check looks at every sandbox whose attempt is in a stage, in this order:
//  1. the stage's deadline (deadline) has not passed since the attempt entered it → leave it;
//  2. nobody drives it any more (its ops is gone or replaced, or it is no longer claimed by
//     it) → fail it at once;
//  3. its input event of this attempt still waits at the consumer that handles it, which
//     works through its queue (queue.go) → leave it: it is queued, not stalled;
//  4. judge: up to Redrives times, a deadline apart, re-publish the stage's input event
//     under re-drive number n (a new message id);
//  5. a deadline after the last re-drive, fail it with <Stage>Failed and a message saying
//     what did not arrive.
func (w *watchdog) check(ctx context.Context) {
	list, err := w.s.sandboxes.List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Watchdog: list sandboxes")
		return
	}
	now := w.now()
	var look *queueLook
	if w.queues != nil {
		look = w.queues.look()
		defer look.done()
	}
	queued := map[string]int{}
	queueErrLogged := false
	publishBroken := false // a re-drive's publish failed in this check: NATS is not taking them
	defer func() {
		for _, stage := range []string{agentsv1alpha1.UpgradingReasonPreUpgrade, agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonPostUpgrade} {
			w.s.metrics.queued.WithLabelValues(stage).Set(float64(queued[stage]))
		}
	}()
	live := map[string]bool{} // the stages in progress now: what the memory of the others is pruned to
	defer w.forgetAllBut(live)
	busStalled := map[types.UID]*busStall{} // the stalled stages a broken publish could not re-drive, by object to warn
	stalls := map[string][]stall{}          // by ops: its sandboxes in a stage re-driven and not left (StagesStalled)
	defer func() {
		for _, key := range w.s.stalls.set(stalls) {
			w.s.opsCtl.EnqueueKey(key)
		}
	}()
	var busErr error
	defer func() { w.warnBusDown(busStalled, busErr) }()
	for _, sb := range list {
		attempt := upgrade.CurrentAttempt(sb)
		stage, ok := upgrade.ReasonFor(sb, attempt)
		if !ok || !upgrade.InProgress(stage) || sb.DeletionTimestamp != nil {
			continue
		}
		live[driveKey(sb, attempt, stage)] = true
		entered := meta.FindStatusCondition(sb.Status.Conditions, upgrade.ConditionAttempt).LastTransitionTime.Time
		deadline := w.deadline(sb, stage)
		stalled := now.Sub(entered)
		if stalled < deadline || w.s.writes.moving(sb.Namespace+"/"+sb.Name) {
			continue // in time, or its next stage waits to be written (--status-coalesce)
		}
		key := driveKey(sb, attempt, stage)
		w.mu.Lock()
		done := w.driven[key]
		w.mu.Unlock()
		logger := klog.FromContext(ctx).WithValues("sandbox", klog.KObj(sb), "attempt", attempt, "stage", stage)
		ctx := klog.NewContext(ctx, logger)
		ops, orphan := w.driver(sb, attempt)
		var err error
		switch {
		case orphan != "":
			wayOn := "create a new SandboxUpdateOps to resume it"
			if strings.HasPrefix(attempt, upgrade.DirectAttemptPrefix) {
				wayOn = fmt.Sprintf("change spec.template again to upgrade it directly (the selector takes the label off first unless SandboxUpdateOps %s runs, which then takes the sandbox instead)", sb.Labels[agentsv1alpha1.LabelUpdateOps])
			}
			err = w.fail(ctx, sb, attempt, ops, stage, fmt.Sprintf("no progress in %s for %s: %s, so nothing drives this attempt any more; the sandbox is left as it is: %s",
				stage, stalled.Round(time.Second), orphan, wayOn))
		default:
			uncertain := false
			if look != nil {
				where, ok, qerr := look.waiting(ctx, sb.Namespace, sb.Name, attempt, stage, deadline)
				uncertain = qerr != nil
				if ok {
					w.mu.Lock()
					w.lastWhere[key] = where
					w.mu.Unlock()
					if look.undelivered {
						// Not delivered yet: time in a queue is not a stall. (An
						// input in flight, or a report waiting to be applied, is
						// bounded by itself and counts.)
						w.mu.Lock()
						w.queuedSeen[key] = now
						w.mu.Unlock()
						if ops != nil {
							// Past its deadline all the same: a backlog, or a
							// consumer whose service takes nothing.
							stalls[ops.Namespace+"/"+ops.Name] = append(stalls[ops.Namespace+"/"+ops.Name], stall{sandbox: sb.Name, stage: stage, queuedAt: look.undeliveredAt})
						}
					}
					queued[stage]++
					logger.V(2).Info("Past its deadline but queued, not stalled", "stalledFor", stalled.Round(time.Second), "input", where)
					continue
				}
				if qerr != nil && !queueErrLogged {
					queueErrLogged = true
					logger.Info("Could not tell whether stages' inputs are still queued; judging them as stalled in this check", "err", qerr)
				}
			}
			watched := w.watching
			w.mu.Lock()
			if q := w.queuedSeen[key]; q.After(watched) {
				watched = q
			}
			w.mu.Unlock()
			switch judge(now, entered, deadline, done, w.cfg.Redrives, watched, uncertain) {
			case verdictWait:
				if done.n > 0 && ops != nil {
					stalls[ops.Namespace+"/"+ops.Name] = append(stalls[ops.Namespace+"/"+ops.Name], stall{sandbox: sb.Name, stage: stage, redrive: done.n, of: w.cfg.Redrives})
				}
			case verdictRedrive:
				if publishBroken {
					busStalled = addBusStall(busStalled, ops, sb)
					continue // each publish would wait its timeout: the next check tries again
				}
				if err = w.redrive(ctx, sb, attempt, ops, stage, done.n+1, stalled); errors.Is(err, errRedrivePublish) {
					publishBroken, busErr = true, err
					busStalled = addBusStall(busStalled, ops, sb)
				} else if err == nil && ops != nil {
					stalls[ops.Namespace+"/"+ops.Name] = append(stalls[ops.Namespace+"/"+ops.Name], stall{sandbox: sb.Name, stage: stage, redrive: done.n + 1, of: w.cfg.Redrives})
				}
			case verdictFail:
				err = w.fail(ctx, sb, attempt, ops, stage, fmt.Sprintf("no progress in %s for %s (deadline %s, re-driven %d times by this statusagg): %s",
					stage, stalled.Round(time.Second), deadline, done.n, w.missing(sb, stage)))
			case verdictGiveUp:
				err = w.fail(ctx, sb, attempt, ops, stage, fmt.Sprintf("no progress in %s for %s (deadline %s): %s; %s",
					stage, stalled.Round(time.Second), deadline, w.givenUp(key, done.n), w.missing(sb, stage)))
			}
		}
		if err != nil {
			logger.Error(err, "Watchdog could not act on a stalled attempt; it will look again")
		}
	}
}

// givenUp says why a stage re-driven n times was given up on, and where to look.
func (w *watchdog) givenUp(key string, n int) string {
	w.mu.Lock()
	where := w.lastWhere[key]
	w.mu.Unlock()
	drove := fmt.Sprintf("re-driven %d times by this statusagg", n)
	if n < w.cfg.Redrives {
		drove = fmt.Sprintf("re-driven %d of %d times by this statusagg (the others could not be published, or whether its input was still queued could not be told; a statusagg before a restart may have re-driven it too)", n, w.cfg.Redrives)
	}
	if where != "" {
		return drove + "; its input was last seen waiting: " + where + "; the service behind that consumer takes nothing: check that it runs and reaches NATS (`make status`, or `kubectl get pods -n molt-system`; its /readyz and log)"
	}
	return drove + ": check that molt's services reach NATS (their /readyz and logs)"
}

// forgetAllBut drops what the watchdog remembers of stages not in live: they ended (or
// their sandbox is gone), so a leader's memory does not grow with every stage it saw.
func (w *watchdog) forgetAllBut(live map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range w.driven {
		if !live[key] {
			delete(w.driven, key)
		}
	}
	for key := range w.queuedSeen {
		if !live[key] {
			delete(w.queuedSeen, key)
		}
	}
	for key := range w.lastWhere {
		if !live[key] {
			delete(w.lastWhere, key)
		}
	}
}

// deadline is how long stage may take for sb: the patch and the preUpgrade hook's timeout
// for PreUpgrade (and the wake-up stages before it), the pod readiness timeout for
// UpgradePod and Checkpointing, the postUpgrade hook's timeout for PostUpgrade, each plus
// the margin.
func (w *watchdog) deadline(sb *agentsv1alpha1.Sandbox, stage string) time.Duration {
	hook := func(a *agentsv1alpha1.UpgradeAction) time.Duration {
		if a == nil {
			return 0
		}
		return a.Timeout()
	}
	lc := upgrade.HooksFor(sb, upgrade.CurrentAttempt(sb))
	if ops, err := w.s.ops.SandboxUpdateOps(sb.Namespace).Get(sb.Labels[agentsv1alpha1.LabelUpdateOps]); err == nil && ops.Spec.Lifecycle != nil {
		lc = ops.Spec.Lifecycle // the patcher may not have copied it into the sandbox yet
	}
	if lc == nil {
		lc = &agentsv1alpha1.SandboxLifecycle{}
	}
	switch stage {
	case agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonCheckpointing, agentsv1alpha1.UpgradingReasonResuming:
		return w.cfg.PodReady + w.cfg.HookMargin
	case agentsv1alpha1.UpgradingReasonPostUpgrade:
		return hook(lc.PostUpgrade) + w.cfg.HookMargin
	default:
		return w.cfg.Patch + hook(lc.PreUpgrade) + w.cfg.HookMargin
	}
}

// driver returns the ops of an ops attempt (nil for a direct one), or why nothing drives
// the attempt any more.
func (w *watchdog) driver(sb *agentsv1alpha1.Sandbox, attempt string) (*agentsv1alpha1.SandboxUpdateOps, string) {
	name := sb.Labels[agentsv1alpha1.LabelUpdateOps]
	if name != "" && strings.HasPrefix(attempt, upgrade.DirectAttemptPrefix) {
		// Labelled by hand mid-attempt: every stage leaves a sandbox with the
		// label to the ops it names, and this attempt is no ops's.
		return nil, fmt.Sprintf("sandbox %s/%s was labelled %s=%s during this direct upgrade, and molt's services leave a sandbox with that label to the SandboxUpdateOps it names",
			sb.Namespace, sb.Name, agentsv1alpha1.LabelUpdateOps, name)
	}
	if name == "" {
		if strings.HasPrefix(attempt, upgrade.DirectAttemptPrefix) {
			return nil, ""
		}
		// Its label removed mid-attempt: the claim annotation still names
		// the ops (upgrade.LostLabelMidAttempt), which drives it on.
		claimed, claimedFor := upgrade.ClaimOf(sb)
		if claimed == "" {
			// The claim wiped with the label (a replace of an older
			// manifest): the ops is the one whose uid the attempt is.
			claimed, claimedFor = w.opsWithUID(sb.Namespace, attempt), attempt
		}
		if claimed == "" || claimedFor != attempt || !upgrade.LostLabelMidAttempt(sb, claimed, types.UID(attempt)) {
			return nil, "the sandbox is no longer claimed by the SandboxUpdateOps that started it"
		}
		name = claimed
	}
	ops, err := w.s.ops.SandboxUpdateOps(sb.Namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("SandboxUpdateOps %s is gone", name)
	case err != nil:
		return nil, ""
	case string(ops.UID) != attempt:
		return nil, fmt.Sprintf("SandboxUpdateOps %s was replaced by a new one of the same name", name)
	}
	return ops, ""
}

// opsWithUID is the name of the SandboxUpdateOps of namespace whose uid is uid
// ("" for none), from the cache.
func (w *watchdog) opsWithUID(namespace, uid string) string {
	list, err := w.s.ops.SandboxUpdateOps(namespace).List(labels.Everything())
	if err != nil {
		return ""
	}
	for _, ops := range list {
		if string(ops.UID) == uid {
			return ops.Name
		}
	}
	return ""
}

// driveKey names a stage of an attempt of a sandbox in watchdog.driven.
func driveKey(sb *agentsv1alpha1.Sandbox, attempt, stage string) string {
	return fmt.Sprintf("%s/%s/%s", sb.UID, attempt, stage)
}

// redrive re-publishes the input event of stage for the attempt, with re-drive number n
// (redriveEvent), and records it in driven. Every handler checks the world first, so a
// stage whose message was only slow does no harm by running again.
func (w *watchdog) redrive(ctx context.Context, sb *agentsv1alpha1.Sandbox, attempt string, ops *agentsv1alpha1.SandboxUpdateOps, stage string, n int, stalled time.Duration) error {
	ev, ok := redriveEvent(sb, w.s.podOf(sb), attempt, ops, stage, n)
	if !ok {
		why := "the pod this upgrade built is gone"
		if pod := w.s.podOf(sb); pod != nil && !upgrade.Restored(pod) {
			why = fmt.Sprintf("pod %s was never restored from checkpoint %s (the checkpoint is kept)", pod.Name, pod.Annotations[upgrade.AnnotationRestoreFrom])
		}
		return w.fail(ctx, sb, attempt, ops, stage, fmt.Sprintf("no progress in %s for %s, and %s, so postUpgrade cannot run; create a SandboxUpdateOps with the same patch and postUpgrade to rebuild the pod and restore the backup", stage, stalled.Round(time.Second), why))
	}
	input := ev.Type
	ev.Type, _ = events.RedriveType(input) // statusagg's own subject: it may publish no other service's event
	if err := w.pub.Publish(ctx, ev); err != nil {
		return fmt.Errorf("%w: re-drive %s of sandbox %s/%s: %w", errRedrivePublish, stage, sb.Namespace, sb.Name, err)
	}
	w.mu.Lock()
	w.driven[driveKey(sb, attempt, stage)] = drives{n: n, last: w.now()}
	w.mu.Unlock()
	w.s.metrics.redrives.WithLabelValues(stage).Inc()
	w.s.recorder.Eventf(sb, corev1.EventTypeWarning, EventStageStalled, "no progress in %s for %s: re-driven (%d of %d) by publishing %s again (as %s); %s",
		stage, stalled.Round(time.Second), n, w.cfg.Redrives, input, ev.Type, stageHandledBy(sb, stage))
	klog.FromContext(ctx).Info("Re-drove a stalled stage", "redrive", n, "event", input, "stalledFor", stalled.Round(time.Second))
	return nil
}

// redriveEvent is the input event of stage for the attempt of sb, whose pod is pod (nil
// when it has none), with re-drive number n: requested for PreUpgrade (and the wake-up
// stages), prehook-done for UpgradePod, pod-ready for PostUpgrade. ok is false when
// PostUpgrade has no pod of this upgrade to run on, or its pod does not hold the
// checkpoint it was built to restore (upgrade.Restored): postUpgrade would run on an
// empty workspace, and the success that follows would delete the checkpoint.
//
// A prehook-done names the pod to replace (OldPodUID) whenever the sandbox has a pod this
// attempt did not build, as the prehook-done it stands in for did: the original pod, or
// one that a failed attempt this one continues built. Without it, the podcycler would take
// a pod already at the target revision for this attempt's new one: the pod a failure left
// behind, or the original pod of a rollback (the template set back to what that pod runs),
// which must be kept with its files, not adopted as a new pod whose files a resume after
// a failed postUpgrade would restore over from an older backup. A pod that is neither (one
// made since the patch by another writer) is taken for the original too: kept or
// replaced, never counted as a new one. A pod this attempt built (or kept) is named by
// its own mark.
func redriveEvent(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod, attempt string, ops *agentsv1alpha1.SandboxUpdateOps, stage string, n int) (ev events.Event, ok bool) {
	d := events.Data{
		Sandbox: events.SandboxRef{Namespace: sb.Namespace, Name: sb.Name, UID: sb.UID},
		Attempt: attempt,
		Redrive: n,
	}
	if ops != nil {
		d.Ops = events.OpsRef{Name: ops.Name, UID: ops.UID}
	}
	d.ResumedAttempt, d.ResumedReason, _ = upgrade.Resumes(sb, attempt)
	if sb.Spec.Template != nil {
		d.TargetRevision, _ = upgrade.Revision(sb.Spec.Template)
	}
	switch stage {
	case agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonCheckpointing:
		// podcycler takes the checkpoint before it replaces the pod, and finds
		// the attempt's Checkpoint again by its name.
		d.Stage = agentsv1alpha1.UpgradingReasonUpgradePod
		if pod != nil && !upgrade.BuiltBy(pod, attempt) {
			d.OldPodUID = pod.UID
		}
		return events.Event{Type: events.TypePreHookDone, Data: d}, true
	case agentsv1alpha1.UpgradingReasonPostUpgrade:
		if pod == nil || (!upgrade.BuiltBy(pod, attempt) && !upgrade.BuiltByResumed(pod, sb, attempt, d.ResumedAttempt)) || !upgrade.Restored(pod) {
			return events.Event{}, false
		}
		d.Stage, d.NewPodUID = agentsv1alpha1.UpgradingReasonUpgradePod, pod.UID
		return events.Event{Type: events.TypePodReady, Data: d}, true
	default:
		return events.Event{Type: events.TypeRequested, Data: d}, true
	}
}

// failPublishWait bounds the history publish of a watchdog's failure.
const failPublishWait = 2 * time.Second

// errRedrivePublish marks a re-drive that failed to publish its event.
var errRedrivePublish = errors.New("publish failed")

// fail ends the attempt in stage's failed reason: the status is written directly (so it
// holds without a stream), then the failure is published for the history, best effort.
func (w *watchdog) fail(ctx context.Context, sb *agentsv1alpha1.Sandbox, attempt string, ops *agentsv1alpha1.SandboxUpdateOps, stage, message string) error {
	d := events.Data{
		Sandbox: events.SandboxRef{Namespace: sb.Namespace, Name: sb.Name, UID: sb.UID},
		Attempt: attempt,
		Stage:   stage,
		Reason:  upgrade.FailedReason(stage),
		Message: agentsv1alpha1.TruncateConditionMessage(message),
	}
	if ops != nil {
		d.Ops = events.OpsRef{Name: ops.Name, UID: ops.UID}
	} else if name := sb.Labels[agentsv1alpha1.LabelUpdateOps]; name != "" && !strings.HasPrefix(attempt, upgrade.DirectAttemptPrefix) {
		d.Ops = events.OpsRef{Name: name, UID: types.UID(attempt)}
	}
	ev := events.Event{Type: events.TypeFailed, Time: w.now(), Data: d}
	if err := w.s.apply(ctx, ev); err != nil {
		return err
	}
	// Best effort, and short: a check that gives up on stages because NATS is down
	// must not wait a publish timeout for each.
	pctx, cancel := context.WithTimeout(ctx, failPublishWait)
	defer cancel()
	if err := w.pub.Publish(pctx, ev); err != nil {
		klog.FromContext(ctx).Info("Could not add the watchdog's failure to the history (the status has it)", "err", err)
	}
	klog.FromContext(ctx).Info("Failed a stalled attempt", "reason", d.Reason, "message", message)
	return nil
}

// stageHandledBy says, for a person, which of molt's services takes stage's
// input, and where to look if the stage stalls again.
func stageHandledBy(sb *agentsv1alpha1.Sandbox, stage string) string {
	consumers := "patcher` (then `hookrunner`, once it is patched)"
	if patchedForAttempt(sb) {
		consumers = "hookrunner` (the sandbox is patched for this upgrade: the patcher passes the request on to it; if hookrunner's shows nothing pending, `nats consumer info MOLT_EVENTS patcher`)"
	}
	switch stage {
	case agentsv1alpha1.UpgradingReasonResuming, agentsv1alpha1.UpgradingReasonResumeSucceed:
		consumers = "patcher`"
	case agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonCheckpointing:
		consumers = "podcycler`"
	case agentsv1alpha1.UpgradingReasonPostUpgrade:
		consumers = "hookrunner-post`"
	}
	return "if it stalls again, check that the service behind the consumer runs and reaches NATS (`make status` or `kubectl get pods -n molt-system`, its /readyz and log; `nats consumer info MOLT_EVENTS " + consumers + ")"
}

// patchedForAttempt reports whether the patcher has written sb for the
// attempt its status shows (its hooks pinned, upgrade.HooksFixedFor, in the
// same write as an ops's spec): a PreUpgrade that stalls since waits on
// hookrunner.
func patchedForAttempt(sb *agentsv1alpha1.Sandbox) bool {
	attempt := upgrade.CurrentAttempt(sb)
	return attempt != "" && upgrade.HooksFixedFor(sb) == attempt
}

// missing says, for a person, which report did not arrive for stage.
func (w *watchdog) missing(sb *agentsv1alpha1.Sandbox, stage string) string {
	switch stage {
	case agentsv1alpha1.UpgradingReasonUpgradePod:
		state := "missing"
		pod := w.s.podOf(sb)
		if pod != nil {
			state = podNotReadyMessage(pod)
		}
		msg := fmt.Sprintf("podcycler did not report the new pod Ready or failed (pod %s: %s); check podcycler's log and `nats consumer info MOLT_EVENTS podcycler`", sb.Name, state)
		if attempt := upgrade.CurrentAttempt(sb); upgrade.ChecksPoint(sb, attempt) && (pod == nil || upgrade.BuiltBy(pod, attempt) || upgrade.BuiltByResumed(pod, sb, attempt, "") || pod.DeletionTimestamp != nil) {
			id := "of this attempt"
			if pod != nil && pod.Annotations[upgrade.AnnotationRestoreFrom] != "" {
				id = pod.Annotations[upgrade.AnnotationRestoreFrom]
			}
			return upgrade.WithNote(msg, upgrade.CheckpointKeptNote(sb.Namespace, sb.Name, id))
		}
		return msg + "; the backup made by preUpgrade is kept: create a new SandboxUpdateOps to resume from UpgradePod"
	case agentsv1alpha1.UpgradingReasonCheckpointing:
		name := upgrade.CheckpointName(sb.Name, upgrade.CurrentAttempt(sb))
		return fmt.Sprintf("podcycler did not report checkpoint %s taken or failed; check the checkpointer (kubectl get cp %s -n %s -o yaml), podcycler's log and `nats consumer info MOLT_EVENTS podcycler`; create a new SandboxUpdateOps to resume (it checkpoints again if the old pod is still there)", name, name, sb.Namespace)
	case agentsv1alpha1.UpgradingReasonResumeSucceed:
		return fmt.Sprintf("the paused sandbox was woken and its pod %s reported Ready, but the patcher did not report its template patched; check the patcher's log and `nats consumer info MOLT_EVENTS patcher`; its preUpgrade has not run: create a new SandboxUpdateOps to resume (it backs the sandbox up first)", sb.Name)
	case agentsv1alpha1.UpgradingReasonResuming:
		state := "missing"
		if pod := w.s.podOf(sb); pod != nil {
			state = podNotReadyMessage(pod)
		}
		return fmt.Sprintf("the paused sandbox was woken for its upgrade, but the patcher did not report its pod Ready (pod %s: %s); check podcycler's and the patcher's logs; nothing was patched: create a new SandboxUpdateOps to resume", sb.Name, state)
	case agentsv1alpha1.UpgradingReasonPostUpgrade:
		return "hookrunner did not report the postUpgrade hook; check hookrunner's log and `nats consumer info MOLT_EVENTS hookrunner-post`; create a SandboxUpdateOps with only postUpgrade to run it again"
	default:
		pod := "the old pod is untouched"
		if w.s.podOf(sb) == nil {
			// Deleted meanwhile (a backup may have been taken before, its
			// report lost with the pod's done mark).
			pod = "the sandbox has no pod now, and the resume may back up the pod it gets next where the last backup is: copy a backup that must be kept away first"
		}
		if patchedForAttempt(sb) {
			return "the patcher patched the sandbox for this upgrade, and statusagg received no report that its preUpgrade hook ended (hookrunner did not send one, the patcher did not pass the request on, or NATS did not deliver it); check hookrunner's log and `nats consumer info MOLT_EVENTS hookrunner`, then the patcher's (`nats consumer info MOLT_EVENTS patcher`); " + pod + ": create a new SandboxUpdateOps to resume"
		}
		return "statusagg received no report that the preUpgrade hook ended (the patcher or hookrunner did not send one, or NATS did not deliver it); check their logs and `nats consumer info MOLT_EVENTS patcher` (and hookrunner); " + pod + ": create a new SandboxUpdateOps to resume"
	}
}
