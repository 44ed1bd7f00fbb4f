package selector

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	listers "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// DirectAttemptPrefix starts the attempt id of an upgrade without an ops:
// "direct-<target revision>-<sandbox generation>", so one template change is
// one attempt, and a template changed back (A→B→A) is a new attempt with an
// id of its own (its events are not dropped as duplicates of the first).
const DirectAttemptPrefix = upgrade.DirectAttemptPrefix

// direct admits sandboxes that carry spec.upgradePolicy and whose template
// no longer matches their pod: they are upgraded the same way, without any
// ops (API.md "Direct upgrade").
type direct struct {
	client    versioned.Interface
	sandboxes listers.SandboxLister
	ops       listers.SandboxUpdateOpsLister
	pods      corelisters.PodLister
	publisher *events.Publisher
	// later looks at a sandbox again after a while (the controller's
	// EnqueueAfter).
	later func(key string, after time.Duration)
	// republishAfter is how long a requested direct attempt may go without
	// its status showing it before `requested` is published again (the
	// same message id: JetStream drops it while it still holds the first).
	republishAfter time.Duration

	// started is the direct attempt this process last requested per
	// sandbox: until statusagg records it, the status does not show it in
	// progress, and a template edited again meanwhile must not start a
	// second attempt beside it (two backups at once, a pod deleted under
	// the other's hook). A restarted selector, or one that never requested
	// it, finds such a request in the stream (UnconsumedRequest).
	mu      sync.Mutex
	started map[string]startedAttempt
}

// startedAttempt is a direct attempt requested at a time, for one sandbox,
// whose status showed attempt shown then.
type startedAttempt struct {
	uid     types.UID
	attempt string
	shown   string
	at      time.Time
}

// directRecordWait is how long a requested direct attempt that statusagg
// has not recorded holds back the next one on the memory alone; after it,
// the stream decides: the next edit goes ahead only if the attempt never
// went on (its request lost), else it waits for statusagg, down or behind,
// in steps of this.
const directRecordWait = 2 * time.Minute

// unrecorded returns the direct attempt this process requested for sb that
// its status does not show yet, and how long it still holds back next ("",
// 0 when none does; the attempt and 0 once directRecordWait has passed: the
// caller asks the stream whether it went on).
func (d *direct) unrecorded(key string, sb *agentsv1alpha1.Sandbox, next string, now time.Time) (string, time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.started[key]
	switch {
	case !ok:
		return "", 0
	case s.uid != sb.UID || upgrade.CurrentAttempt(sb) == s.attempt ||
		(upgrade.CurrentAttempt(sb) != s.shown && supersedes(upgrade.CurrentAttempt(sb), s.attempt)):
		delete(d.started, key)
		return "", 0
	case s.attempt == next:
		return "", 0
	case now.Sub(s.at) >= directRecordWait:
		return s.attempt, 0
	}
	return s.attempt, directRecordWait - now.Sub(s.at)
}

// supersedes reports whether cur, the attempt a sandbox's status shows now,
// another than the one it showed when the direct attempt requested was
// asked for, was started after it: an ops's (an ops admits no sandbox while
// a direct attempt of it is requested and not recorded, so that one was
// recorded and ended before), or a direct attempt of a later generation. The status may have shown requested only between two looks,
// and a memory of it kept would hold back the next edit, and the return of
// the sandbox's own hooks, for good.
func supersedes(cur, requested string) bool {
	if cur == "" {
		return false
	}
	curGen, curDirect := upgrade.DirectAttemptGeneration(cur)
	if !curDirect {
		return true
	}
	gen, ok := upgrade.DirectAttemptGeneration(requested)
	return ok && curGen > gen
}

// requested records that next was requested for sb at now.
func (d *direct) requested(key string, sb *agentsv1alpha1.Sandbox, next string, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started == nil {
		d.started = map[string]startedAttempt{}
	}
	d.started[key] = startedAttempt{uid: sb.UID, attempt: next, shown: upgrade.CurrentAttempt(sb), at: now}
}

// forget drops what is remembered of a sandbox that is gone.
func (d *direct) forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.started, key)
}

// pendingDirect returns a direct attempt requested for sb that statusagg has
// not consumed yet (the stream's last `requested` of the sandbox, when it is
// a direct attempt its status does not show): its stages may be running on
// the sandbox while its status does not say so, and an ops that claimed it
// now would back up the pod that attempt built, or run beside it. "" when
// there is none. A stream read, asked only of sandboxes with
// spec.upgradePolicy as an ops admits them.
func (d *direct) pendingDirect(ctx context.Context, sb *agentsv1alpha1.Sandbox) (string, error) {
	attempt, err := d.publisher.UnconsumedRequest(ctx, sb.Namespace, sb.Name, sb.UID)
	if err != nil || !strings.HasPrefix(attempt, DirectAttemptPrefix) || attempt == upgrade.CurrentAttempt(sb) {
		return "", err
	}
	return attempt, nil
}

// podOwnerHandler maps a pod event to its sandbox's key (same name).
func podOwnerHandler(enqueue func(string)) cache.ResourceEventHandler {
	on := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			enqueue(pod.Namespace + "/" + pod.Name)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, o any) { on(o) }, DeleteFunc: on}
}

// sync first puts a sandbox's own hooks back once an ops that wrote its own
// is done with it (ownLifecycleBack). Then it starts a direct upgrade of the
// sandbox when:
//  1. it has spec.upgradePolicy and a template and is not being deleted;
//  2. no active ops claims it, no attempt of it is in progress, and it is
//     not left failed by an ops (that is resumed by a new ops);
//  3. its pod exists and was built from another revision than the template,
//     or the template was set back to its pod's after a direct attempt
//     failed before it replaced that pod (rolledBack), or the template was
//     changed after a direct attempt failed and its pod is one that attempt
//     built (restoreOwed);
//  4. this revision has not already failed (a new template change retries).
//
// A label left by a finished ops is removed first, so every stage sees a
// sandbox claimed by no ops; then `requested` is published.
func (d *direct) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	sb, err := d.sandboxes.Sandboxes(ns).Get(name)
	if apierrors.IsNotFound(err) {
		d.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if wrote, err := d.ownLifecycleBack(ctx, key, sb, false); wrote || err != nil {
		return err
	}
	if sb.DeletionTimestamp != nil || sb.Spec.UpgradePolicy == nil || sb.Spec.Template == nil || sb.Spec.Paused {
		if why := sb.Spec.TemplateProblem(); why != "" && sb.Spec.UpgradePolicy != nil {
			klog.FromContext(ctx).Info("No direct upgrade: the template cannot be read", "sandbox", klog.KObj(sb), "cause", why)
		}
		return nil
	}
	if claimed := sb.Labels[agentsv1alpha1.LabelUpdateOps]; claimed != "" {
		// An ops being deleted drives it too while it holds its finalizer:
		// its release waits for a sandbox in a stage, or patched before
		// statusagg recorded it, and strips the label of every other.
		if o, err := d.ops.SandboxUpdateOps(ns).Get(claimed); err == nil && upgrade.HoldsNamespace(o) {
			return nil // the ops drives this sandbox
		}
	}
	attempt := upgrade.CurrentAttempt(sb)
	if upgrade.IsResumable(sb) && !strings.HasPrefix(attempt, DirectAttemptPrefix) {
		return nil // an ops's failed upgrade waits for a new ops to resume it
	}
	reason, _ := upgrade.ReasonFor(sb, attempt)
	if attempt != "" && reason != agentsv1alpha1.UpgradingReasonSucceeded && !agentsv1alpha1.IsUpgradingFailedReason(reason) {
		return nil // an attempt is in progress
	}
	pod, err := d.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	revision, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		return nil
	}
	if pod.DeletionTimestamp != nil || (pod.Labels[agentsv1alpha1.LabelPodTemplateHash] == revision && !rolledBack(sb, attempt, reason, revision) && !restoreOwed(sb, pod, attempt, reason, revision)) {
		return nil
	}
	if !upgrade.ControlledBy(pod, sb.UID) {
		// The pod of an earlier sandbox of this name, waiting for the
		// garbage collector: this sandbox gets its first pod, not an
		// upgrade (the pod informer looks again once that one is gone).
		return nil
	}
	next := upgrade.DirectAttempt(revision, sb.Generation)
	if attempt == next {
		return nil // this revision already ran (and failed, or is finishing)
	}
	logger := klog.FromContext(ctx).WithValues("sandbox", klog.KObj(sb), "attempt", next)
	prev, wait := d.unrecorded(key, sb, next, time.Now())
	if prev == "" {
		// Nothing remembered (or this process restarted since): the stream
		// holds a request statusagg has not recorded yet.
		pending, err := d.publisher.UnconsumedRequest(ctx, ns, name, sb.UID)
		if err != nil {
			return fmt.Errorf("direct upgrade of sandbox %s: read the event stream for an attempt requested before: %w", key, err)
		}
		if pending != "" && pending != next && pending != attempt {
			logger.Info("Wait: an attempt requested before is not recorded by statusagg yet (is statusagg running?)", "previous", pending)
			prev, wait = pending, directRecordWait
		}
	}
	if prev != "" && wait == 0 {
		switch handled, err := requestHandled(ctx, d.publisher, sb, prev); {
		case err != nil:
			wait = directRecordWait // cannot tell: hold back, and ask again
		case handled:
			// It went on, and statusagg has not recorded it for
			// directRecordWait: a second attempt beside it would back up
			// and replace the same pod. Wait for statusagg.
			logger.Info("Wait: the direct attempt requested before went on and statusagg has not recorded it yet (is statusagg running?)", "previous", prev)
			wait = directRecordWait
		default:
			d.forget(key) // its request was lost: nothing runs beside this one
		}
	}
	if wait > 0 {
		logger.V(2).Info("Wait: the direct attempt requested before is not recorded yet", "previous", prev, "recheckIn", wait)
		if d.later != nil {
			d.later(key, wait)
		}
		return nil
	}
	if handled, err := requestHandled(ctx, d.publisher, sb, next); err == nil && handled {
		// Requested before, and a stage went on with it: its status is
		// statusagg's to write. Looked at again, in case it never does.
		if d.later != nil && d.republishAfter > 0 {
			d.later(key, d.republishAfter)
		}
		return nil
	}
	if wrote, err := d.ownLifecycleBack(ctx, key, sb, true); wrote || err != nil {
		return err // the write brings the sandbox back, its own hooks in place
	}
	failed, failedReason, resumes := upgrade.FailedAttempt(sb)
	version := sb.ResourceVersion // the cache's copy holds the template the attempt is for
	if sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" || resumes {
		patch := metaPatch{Metadata: metaFields{ResourceVersion: sb.ResourceVersion}}
		if sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" {
			patch.Metadata.Labels = map[string]*string{agentsv1alpha1.LabelUpdateOps: nil}
		}
		if resumes {
			patch.Metadata.Annotations = map[string]*string{upgrade.AnnotationResumes: ptr(upgrade.ResumesValue(next, failed, failedReason, upgrade.ChainBehind(sb, failed)...))}
		}
		written, err := d.client.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, name, types.MergePatchType, patch.encode(), metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("prepare sandbox %s for a direct upgrade: %w", key, err)
		}
		version = written.ResourceVersion
	}
	ev := events.Event{Type: events.TypeRequested, Data: events.Data{
		Sandbox: events.SandboxRef{Namespace: ns, Name: name, UID: sb.UID},
		Attempt: next,

		SandboxResourceVersion: version,
	}}
	// A direct attempt that failed is continued, not restarted: the pod it
	// built is never backed up over the good backup (upgrade.ResumeAt).
	if resumes {
		ev.Data.ResumedAttempt, ev.Data.ResumedReason = failed, failedReason
	}
	if err := d.publisher.Publish(ctx, ev); err != nil {
		return fmt.Errorf("request direct upgrade of sandbox %s: %w", key, err)
	}
	d.requested(key, sb, next, time.Now())
	logger.Info("Direct upgrade requested: the template changed and spec.upgradePolicy is set", "revision", revision, "podRevision", pod.Labels[agentsv1alpha1.LabelPodTemplateHash])
	if d.later != nil && d.republishAfter > 0 {
		// A requested lost after its publish (the stream deleted or wiped)
		// is a delay, not a hang: looked at again, a sandbox whose status
		// does not show the attempt yet gets it again (the steps above
		// return early once it does, or once the pod runs the template).
		d.later(key, d.republishAfter)
	}
	return nil
}

// rolledBack reports whether attempt, the sandbox's current one, is a direct
// attempt to another revision than revision (the template's, which its pod
// runs) that failed (reason) before it replaced the pod: the pod is the one
// it started from, and the template names that pod's revision again, a
// rollback: the attempt it starts continues the failed one (upgrade.ResumeAt)
// and keeps the pod under Recreate (podcycler's runsTarget; under
// CheckpointRestore the pod is checkpointed and replaced, as in any such
// upgrade), and the sandbox leaves the failure. Without it, a sandbox that is healthy on its template again would
// show Upgrading and Ready=False until an ops resumed it.
//
// A pod that the sandbox got from the failed attempt's own template (its pod
// was lost meanwhile: the patcher's failure says so) is not its starting pod:
// a spec edit that leaves the template as it is does not start an attempt
// that would back that pod up.
func rolledBack(sb *agentsv1alpha1.Sandbox, attempt, reason, revision string) bool {
	return strings.HasPrefix(attempt, DirectAttemptPrefix) && !strings.HasPrefix(attempt, DirectAttemptPrefix+revision+"-") && agentsv1alpha1.IsUpgradingFailedReason(reason) &&
		!upgrade.MayHaveReplacedPod(sb, attempt, reason)
}

// restoreOwed reports whether attempt, the sandbox's current one, is a direct
// attempt that failed (reason) for another revision than revision, the
// template's, while pod, which runs revision already, is a new pod that
// attempt or one it continued built (upgrade.NewPodOf: podcycler builds a pod
// missing after such a failure as one of the attempt): the template was
// changed since, to retry, and the pod was rebuilt from it before the
// selector looked (the failed attempt's new pod deleted, say, and its rebuild
// refused until this edit). That pod holds no workspace of its own: the
// attempt the edit starts continues the failed one, and restores the backup
// into it (upgrade.ResumeAt). Without it, the edit the failure's message asks
// for started nothing, as the pod already ran the template, and the sandbox
// stayed failed with its backup not restored. A pod the attempt did not
// build may be the one it started from, with the workspace in it: that is
// rolledBack's case. The pod must be Ready (its update to Ready brings the
// sandbox back): the resume restores into a Ready pod of the target
// (upgrade.ResumeAt), and would rebuild one that is not.
func restoreOwed(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod, attempt, reason, revision string) bool {
	if !strings.HasPrefix(attempt, DirectAttemptPrefix) || strings.HasPrefix(attempt, DirectAttemptPrefix+revision+"-") || !agentsv1alpha1.IsUpgradingFailedReason(reason) ||
		!upgrade.PodReady(pod) {
		return false
	}
	return upgrade.NewPodOf(pod, attempt) || slices.ContainsFunc(upgrade.ResumedChain(sb, attempt), func(a string) bool { return upgrade.NewPodOf(pod, a) })
}
