package podcycler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// How one delivery of prehook-done waits for the old pod's name to be free.
const (
	// nameFreeWait bounds the wait within one delivery; after it the message is redelivered
	// (nameTakenRetry later), so a slow graceful deletion does not hold a worker for long.
	nameFreeWait = 30 * time.Second
	// nameFreePoll is only a backstop: the pod informer's delete, or its
	// update to a pod of a new UID, wakes the wait (podGone). At 100% a
	// thousand waits polling every 100 ms cost podcycler 5% of its CPU.
	nameFreePoll   = time.Second
	nameTakenRetry = 2 * time.Second
	// quotaRetry is how long a create that a full ResourceQuota refused
	// waits before the next delivery tries again. The API server counts a
	// deleted pod's share of the quota as free only once
	// kube-controller-manager's quota controller has recounted the
	// namespace, seconds after the delete this handler has just made.
	quotaRetry = 5 * time.Second
)

// handlePreHookDone replaces a sandbox's pod with one built from its patched template (see
// replacePod). A re-driven prehook-done (the watchdog found the stage stalled) also makes
// the readiness wait report the pod's outcome again, under the re-drive's message ids.
func (c *cycler) handlePreHookDone(ctx context.Context, msg *events.Message) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("stage", agentsv1alpha1.UpgradingReasonUpgradePod))
	if msg.Event.Redriven {
		if refused, err := c.refuseRedrive(ctx, msg.Event); refused || err != nil {
			return err
		}
	}
	if r := msg.Event.Data.Redrive; r > 0 {
		key := msg.Event.SandboxKey()
		c.redrives.Store(key, redrive{attempt: msg.Event.Data.Attempt, n: r})
		c.reported.Delete(key)
		c.ctl.EnqueueKey(key)
	}
	return c.replacePod(ctx, msg.Event)
}

// refuseRedrive reports whether the re-driven prehook-done ev must not be acted
// on (upgrade.RedriveRefusal), read from the API server: the attempt is not yet
// past PreUpgrade in status, so the pod would be replaced before its backup.
// Refused, it is acknowledged and logged; a stale one (the sandbox gone,
// replaced, or claimed by another attempt) is left to replacePod's own skip.
func (c *cycler) refuseRedrive(ctx context.Context, ev events.Event) (bool, error) {
	d := ev.Data
	sb, err := upgrade.GetAtLeast(ctx, c.agents, d.Sandbox.Namespace, d.Sandbox.Name, "")
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get sandbox %s to check a re-drive: %w", ev.SandboxKey(), err)
	case sb.UID != d.Sandbox.UID || !upgrade.ClaimedBy(sb, d.Ops.Name, d.Attempt):
		return false, nil // stale: replacePod skips it
	}
	if why := upgrade.RedriveRefusal(sb, d.Attempt, agentsv1alpha1.UpgradingReasonCheckpointing); why != "" {
		klog.FromContext(ctx).Error(nil, upgrade.RedriveRefused, "event", ev.Type, "why", why, "source", ev.Source, "redrive", d.Redrive)
		return true, nil
	}
	return false, nil
}

// redrive is the watchdog's re-drive number n of an attempt's UpgradePod.
type redrive struct {
	attempt string
	n       int
}

// upgradePodFailure files a prehook-done podcycler could not handle on its last delivery
// under UpgradePod (see events.FailOnLastDelivery).
func upgradePodFailure(ev events.Event) (events.StageFailure, bool) {
	if ev.Type != events.TypePreHookDone {
		return events.StageFailure{}, false
	}
	return events.StageFailure{Stage: agentsv1alpha1.UpgradingReasonUpgradePod, Reason: agentsv1alpha1.UpgradingReasonUpgradePodFailed}, true
}

// replacePod is the UpgradePod stage's checklist:
//
//  1. load the sandbox; gone, replaced by another of the same name, or no longer labelled
//     by the event's ops → skip (stale);
//  2. the attempt already past UpgradePod in status → skip;
//  3. the pod of this attempt already exists (target revision, this attempt's
//     annotation or not the old pod, and under CheckpointRestore a checkpoint to
//     restore) → skip to the wait, adopting it if another writer created it;
//  4. a pod of that name that the sandbox does not control is not molt's: fail
//     (UpgradePodFailed), touching nothing;
//     the old pod already Ready on the target revision, and holding the workspace
//     (runsTarget) → keep it: adopt it, and go on to the wait;
//  5. validate before destroying: the new pod must pass a server-side dry-run create; a
//     refusal fails the sandbox (UpgradePodFailed, the server's words) and the old pod
//     keeps running (a ResourceQuota that a copy of the old pod exceeds too is full to the
//     pod, not a refusal: upgrade.DryRunReplacePod);
//  6. publish stage-started UpgradePod;
//  7. delete the old pod with a UID precondition and wait until its name is free; a
//     delete the API server refuses for good fails the sandbox (UpgradePodFailed, the
//     server's words; deleteRefused) and the old pod keeps running;
//  8. create the new pod: target revision, this attempt.
//
// The wait for Ready is finished by the Pod informer (watchUpgradedPod).
func (c *cycler) replacePod(ctx context.Context, ev events.Event) error {
	d := ev.Data
	key, ns, name := ev.SandboxKey(), d.Sandbox.Namespace, d.Sandbox.Name
	logger := klog.FromContext(ctx)

	sb, err := c.loadSandbox(ctx, d)
	switch {
	case apierrors.IsNotFound(err):
		logger.Info("Skip: sandbox is gone")
		return nil
	case err != nil:
		return fmt.Errorf("get sandbox %s: %w", key, err)
	case sb.UID != d.Sandbox.UID || sb.DeletionTimestamp != nil:
		logger.Info("Skip: sandbox was deleted or replaced", "uid", sb.UID)
		return nil
	case !upgrade.ClaimedBy(sb, d.Ops.Name, d.Attempt):
		logger.Info("Skip: stale event, sandbox belongs to another ops or attempt", "currentOps", sb.Labels[agentsv1alpha1.LabelUpdateOps], "claim", sb.Annotations[upgrade.AnnotationClaim])
		return nil
	case sb.Spec.Template == nil:
		// Its spec.template was removed since the patch (spec.templateRef
		// instead): nothing to build the new pod from, and waiting cannot
		// mend it. Said now, not at the watchdog's deadline.
		return c.failStage(ctx, d, fmt.Sprintf("sandbox %s has no spec.template to build its new pod from (it was removed after the patch; spec.templateRef is not supported): UpgradePod cannot go on, and the old pod was not deleted by it: set spec.template again (kubectl edit sbx %s -n %s), then create a new SandboxUpdateOps to resume",
			key, sb.Name, sb.Namespace))
	}
	if reason, ok := upgrade.ReasonFor(sb, d.Attempt); ok && upgrade.Past(reason, agentsv1alpha1.UpgradingReasonUpgradePod) {
		logger.Info("Skip: attempt already past UpgradePod", "reason", reason)
		return nil
	}
	target, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		return fmt.Errorf("hash template of sandbox %s: %w", key, err)
	}

	end := c.inFlight.begin(key)
	defer end()
	old, err := c.livePod(ctx, ns, name)
	if err != nil {
		return err
	}
	// Before a pod is adopted, kept or built: one built from an edit that undid
	// the patch (by the lifecycle loop after this handler died, or now) would be
	// counted as updated without the upgrade.
	if undone, err := c.patchUndone(ctx, sb, old, d, target); err != nil {
		return err
	} else if undone != "" {
		return c.failStage(ctx, d, undone)
	} else if d.TargetRevision != "" && d.TargetRevision != target {
		logger.Info("Template changed since it was patched, the patch still whole; building the current one", "eventRevision", d.TargetRevision, "revision", target)
	}
	if old != nil && isAttemptPod(old, sb, target, d) {
		logger.Info("Skip: pod already replaced, waiting for it", "pod", klog.KObj(old), "uid", old.UID)
		return c.adopt(ctx, old, d)
	}
	if old != nil && !ownedBy(old, sb.UID) {
		return c.failStage(ctx, d, fmt.Sprintf("pod %s/%s (uid %s) is not controlled by sandbox %s (uid %s), so molt does not delete it; the sandbox was not changed: delete or rename that pod, then create a new SandboxUpdateOps to resume",
			ns, name, old.UID, name, sb.UID))
	}
	if old != nil && runsTarget(old, sb, target, d) {
		logger.Info("The pod already runs the target template: kept, not replaced", "pod", klog.KObj(old), "uid", old.UID, "revision", target)
		// This process may have reported the pod ready for the attempt
		// that built it: the wait reports it again, for this attempt.
		c.reported.Delete(key)
		return c.keep(ctx, old, d)
	}
	pod := buildPod(sb, target, d.Attempt, d.Ops.Name)
	if old != nil && old.DeletionTimestamp == nil {
		if bad := upgrade.ImageProblem(&pod.Spec); bad != "" {
			return c.failStage(ctx, d, fmt.Sprintf("the new pod of sandbox %s has an image the kubelet cannot pull: %s; the old pod (uid %s) was not deleted and keeps running: fix the patch or the sandbox's template, then create a new SandboxUpdateOps to resume",
				key, bad, old.UID))
		}
		if refused, err := upgrade.DryRunReplacePod(ctx, c.kube, pod, old); err != nil {
			return err
		} else if refused != "" {
			return c.failStage(ctx, d, fmt.Sprintf("the API server refuses the new pod of sandbox %s: %s; the old pod (uid %s) was not deleted and keeps running: fix the patch or the sandbox's template, then create a new SandboxUpdateOps to resume",
				key, refused, old.UID))
		}
	}
	if upgrade.ChecksPoint(sb, d.Attempt) {
		// The template may have changed since the patcher checked it (a direct
		// attempt's template edited again meanwhile), or it already ran another
		// image than the pod: a checkpoint is never restored onto a new image.
		if changed := upgrade.ChangedImages(old, sb.Spec.Template); len(changed) > 0 && originalPodRuns(old, sb, d) {
			return c.failCheckpoint(ctx, d, fmt.Sprintf("the template of sandbox %s changes an image from what its pod runs (%s), and a CheckpointRestore cannot restore a checkpoint onto a new image; no checkpoint was taken and the old pod (uid %s) keeps running: put the image back, or upgrade the sandbox with updateStrategy.type Recreate (with preUpgrade/postUpgrade hooks to keep the workspace)",
				key, strings.Join(changed, ", "), old.UID))
		}
		id, problem, err := c.checkpoint(ctx, sb, old, d)
		if err != nil && originalPodRuns(old, sb, d) {
			// Given up on while the original pod still runs, it is the
			// checkpoint's failure (CheckpointFailed, not UpgradePodFailed):
			// nothing was touched. Without that pod (an earlier delivery
			// deleted it, or a resume restores a kept checkpoint) it stays
			// UpgradePod's.
			return events.AtStage(events.StageFailure{Stage: agentsv1alpha1.UpgradingReasonCheckpointing, Reason: agentsv1alpha1.UpgradingReasonCheckpointFailed}, err)
		}
		if err != nil {
			return err
		}
		if problem != "" {
			if sb.Spec.Paused {
				problem = upgrade.WithNote(problem, pausedCheckpointNote)
			}
			return c.failCheckpoint(ctx, d, problem)
		}
		pod.Annotations[upgrade.AnnotationRestoreFrom] = id
		// The checkpoint may have taken up to --pod-ready-timeout: look again
		// before destroying anything, as the watchdog may have failed the
		// attempt meanwhile, or the ops or the sandbox may be gone.
		if stale, err := c.stillToReplace(ctx, sb, d); err != nil || stale != "" {
			if stale != "" {
				logger.Info("Skip: " + stale + "; the old pod was not deleted")
			}
			return err
		}
	}

	started := events.Event{Type: events.TypeStageStarted, Data: stageData(d)}
	started.Data.TargetRevision = target
	if err := c.publisher.Publish(ctx, started); err != nil {
		return fmt.Errorf("report stage UpgradePod of sandbox %s: %w", key, err)
	}

	if old != nil {
		if old.DeletionTimestamp == nil {
			if err := c.deletePod(ctx, ns, name, old.UID, reasonUpgrade); err != nil {
				return c.deleteRefused(ctx, d, old, err)
			}
			logger.Info("Deleted old pod", "pod", klog.KObj(old), "uid", old.UID)
		}
		if err := c.waitNameFree(ctx, ns, name, old.UID); err != nil {
			return events.Retry(err, nameTakenRetry)
		}
	}

	created, err := c.createPod(ctx, pod, reasonUpgrade)
	if refused := upgrade.PodRefusal(err); refused != "" && quotaRefused(err) {
		// The old pod is gone: the replacement's dry run passed because
		// its delete makes room, and the quota has not counted that yet.
		// Not the pod's fault: tried again, and if the room never comes
		// the last delivery fails the stage with these words.
		logger.Info("The namespace's ResourceQuota refuses the new pod for now; trying again", "cause", refused, "recheckIn", quotaRetry)
		return events.Retry(fmt.Errorf("the API server refused the new pod of sandbox %s for the namespace's ResourceQuota (%s), and the old pod is already deleted: the quota still counts no room for it (kube-controller-manager's resourcequota controller frees a deleted pod's share; is it running?); raise the quota or free room in namespace %s (kubectl describe resourcequota -n %s): the sandbox then gets its new pod by itself, and a new SandboxUpdateOps resumes its upgrade",
			key, refused, ns, ns), quotaRetry)
	}
	if refused := upgrade.PodRefusal(err); refused != "" {
		message := fmt.Sprintf("the API server refused the new pod of sandbox %s: %s; fix the patch or the sandbox's template, then create a new SandboxUpdateOps to resume", key, refused)
		// Its dry run passed before the delete, or it had none (a
		// redelivery): the sandbox is left with no pod.
		gone := "its old pod is gone"
		if old != nil {
			gone = fmt.Sprintf("its old pod (uid %s) is already deleted", old.UID)
		}
		message += "; " + gone + ", so the sandbox has no pod until then: podcycler builds it once the API server accepts the template, and the resume goes on from UpgradePod, with no second backup"
		if id := pod.Annotations[upgrade.AnnotationRestoreFrom]; id != "" {
			message = upgrade.WithNote(message, upgrade.CheckpointKeptNote(ns, name, id))
		}
		return c.failStage(ctx, d, message)
	}
	if err != nil {
		return err
	}
	if created != nil {
		logger.Info("Created new pod", "pod", klog.KObj(created), "uid", created.UID, "revision", target)
		return nil
	}
	// The name is taken again: by a pod another writer built for this attempt (adopt
	// it), or by one still going away (look again shortly).
	taken, err := c.livePod(ctx, ns, name)
	if err != nil {
		return err
	}
	if taken != nil && isAttemptPod(taken, sb, target, d) {
		logger.Info("Pod created by another writer for this attempt, adopting it", "pod", klog.KObj(taken), "uid", taken.UID)
		return c.adopt(ctx, taken, d)
	}
	return events.Retry(fmt.Errorf("create pod %s/%s: name still taken", ns, name), nameTakenRetry)
}

// loadSandbox returns the event's sandbox: the informer's copy when it already
// shows what the event says the earlier stages wrote (the same sandbox, still
// claimed by the ops, the template at the patched revision, and at least the
// version the patcher wrote), else a fresh read (at least as new as that
// version, from the API server's watch cache, upgrade.GetAtLeast). The
// version matters on a resume: the template is already at the target
// revision, and a copy from before the patcher's write lacks its
// CheckpointRestore mark (upgrade.ChecksPoint), so the old pod would be
// deleted without a checkpoint. Whatever the copy's status says, the pod's
// own state decides what is done next (livePod, isAttemptPod; the delete has
// a UID precondition).
func (c *cycler) loadSandbox(ctx context.Context, d events.Data) (*agentsv1alpha1.Sandbox, error) {
	ns, name := d.Sandbox.Namespace, d.Sandbox.Name
	if cached, err := c.sandboxes.Sandboxes(ns).Get(name); err == nil && d.TargetRevision != "" &&
		cached.UID == d.Sandbox.UID && cached.DeletionTimestamp == nil && atLeast(cached.ResourceVersion, d.SandboxResourceVersion) &&
		upgrade.ClaimedBy(cached, d.Ops.Name, d.Attempt) && cached.Spec.Template != nil {
		if rev, err := upgrade.Revision(cached.Spec.Template); err == nil && rev == d.TargetRevision {
			return cached.DeepCopy(), nil
		}
	}
	return upgrade.GetAtLeast(ctx, c.agents, ns, name, d.SandboxResourceVersion)
}

// atLeast reports whether resource version have is at least want; false
// when want is empty or either is not a version the API server's etcd
// storage gives (then the caller reads from the API server).
func atLeast(have, want string) bool {
	cmp, err := resourceversion.CompareResourceVersion(have, want)
	return err == nil && cmp >= 0
}

// deleteRefused handles err, the failed delete of the sandbox's old pod old
// in the UpgradePod stage of d. A refusal for good (upgrade.Refusal: an
// admission policy or webhook guarding pods, podcycler's RBAC) fails the
// stage at once with the API server's words: a redelivery would get the same
// answer, minutes later. The pod is read again first: a refusal of a name
// that now holds another pod (admission answers before the UID precondition
// is checked), or none, is left to the retry, which looks at the pod again.
// Any other error is returned for a retry.
func (c *cycler) deleteRefused(ctx context.Context, d events.Data, old *corev1.Pod, err error) error {
	words := upgrade.Refusal(err)
	if words == "" {
		return err
	}
	now, gerr := c.livePod(ctx, old.Namespace, old.Name)
	if gerr != nil {
		return fmt.Errorf("%w; then %w", err, gerr)
	}
	if now == nil || now.UID != old.UID || now.DeletionTimestamp != nil {
		return err
	}
	return c.failStage(ctx, d, fmt.Sprintf("the API server refused to delete the old pod %s (uid %s) of sandbox %s/%s: %s; the old pod keeps running and no new pod was created: fix the cause (an admission policy or webhook guarding pods, podcycler's RBAC), then create a new SandboxUpdateOps to resume",
		old.Name, old.UID, d.Sandbox.Namespace, d.Sandbox.Name, words))
}

// failStage ends the attempt in UpgradePodFailed with message.
func (c *cycler) failStage(ctx context.Context, in events.Data, message string) error {
	return c.fail(ctx, in, agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonUpgradePodFailed, message)
}

// fail ends the attempt of in in stage with reason and message.
func (c *cycler) fail(ctx context.Context, in events.Data, stage, reason, message string) error {
	d := stageData(in)
	d.Stage, d.Reason = stage, reason
	d.Message = agentsv1alpha1.TruncateConditionMessage(message)
	if err := c.publisher.Publish(ctx, events.Event{Type: events.TypeFailed, Data: d}); err != nil {
		return fmt.Errorf("report failed %s of sandbox %s/%s: %w", stage, d.Sandbox.Namespace, d.Sandbox.Name, err)
	}
	klog.FromContext(ctx).Info(stage+" failed", "reason", reason, "message", d.Message)
	return nil
}

// stageData is what podcycler's events about the UpgradePod stage carry from the
// prehook-done that started it.
func stageData(in events.Data) events.Data {
	return events.Data{
		Ops:            in.Ops,
		Sandbox:        in.Sandbox,
		Attempt:        in.Attempt,
		Stage:          agentsv1alpha1.UpgradingReasonUpgradePod,
		TargetRevision: in.TargetRevision,
		OldPodUID:      in.OldPodUID,
		ResumedAttempt: in.ResumedAttempt,
		ResumedReason:  in.ResumedReason,
		Redrive:        in.Redrive,

		SandboxResourceVersion: in.SandboxResourceVersion,
	}
}

// isAttemptPod reports whether pod is the one this attempt wants: controlled by sb, not
// being deleted, built from the target revision, and either created by this attempt or
// not the pod that existed when the template was patched.
//
// A watchdog re-drive that names no old pod (its pod cache showed none, or it came from a
// statusagg that did not name the original pod) cannot tell the original pod from one
// built since: only the attempt's own mark makes the pod this attempt's. Otherwise the
// original pod of a rollback (the template set back to what it runs) would be adopted as
// this attempt's new pod instead of kept (runsTarget), and a resume after a failed
// postUpgrade would skip its backup and restore an older one over its live files.
//
// Under CheckpointRestore it must also restore a checkpoint (restore-from): a pod
// without it (built by an older podcycler, or by another writer) would be reported Ready
// with an empty workspace. It is not adopted but replaced like an old pod: deleted by
// UID after the checkpoint to restore is known (planRestore: the attempt's own, one kept
// by the failed attempt it continues, or else a new one of this very pod, so whatever
// it holds is kept). Replacing finishes the attempt with the workspace restored; failing
// it would lose nothing either (checkpoints outlive failures) but would need a new ops.
func isAttemptPod(pod *corev1.Pod, sb *agentsv1alpha1.Sandbox, target string, d events.Data) bool {
	if pod.DeletionTimestamp != nil || !ownedBy(pod, sb.UID) || pod.Labels[agentsv1alpha1.LabelPodTemplateHash] != target {
		return false
	}
	if upgrade.ChecksPoint(sb, d.Attempt) && pod.Annotations[upgrade.AnnotationRestoreFrom] == "" {
		return false
	}
	if pod.Annotations[upgrade.AnnotationPodAttempt] == d.Attempt {
		return true
	}
	if d.Redrive > 0 && d.OldPodUID == "" {
		return false // taken for the original pod: kept or replaced, never adopted
	}
	return pod.UID != d.OldPodUID
}

// runsTarget reports whether pod, the sandbox's pod that this attempt would replace,
// already runs the target revision and holds the workspace: live, controlled by sb,
// Ready, built from the target revision, and not by a failed attempt this one continues
// (that pod holds no workspace). It is kept, and the attempt goes on with it, instead of
// being replaced by an identical pod that starts from an empty filesystem. That is what
// happens when a rollback ops sets back the template of a sandbox whose upgrade failed
// before its pod was replaced. Under CheckpointRestore the pod is replaced as usual: the
// checkpoint carries the workspace over.
func runsTarget(pod *corev1.Pod, sb *agentsv1alpha1.Sandbox, target string, d events.Data) bool {
	return pod.DeletionTimestamp == nil && ownedBy(pod, sb.UID) && upgrade.PodReady(pod) &&
		pod.Labels[agentsv1alpha1.LabelPodTemplateHash] == target &&
		!upgrade.BuiltByResumed(pod, sb, d.Attempt, d.ResumedAttempt) && !upgrade.ChecksPoint(sb, d.Attempt)
}

// adopt makes pod carry the attempt's annotations (a pod built for the attempt by another
// writer may lack them), so the informer-driven wait reports on it.
func (c *cycler) adopt(ctx context.Context, pod *corev1.Pod, d events.Data) error {
	return c.annotateForAttempt(ctx, pod, d, false)
}

// keep makes pod, an original pod that already runs the target revision (runsTarget),
// the attempt's pod as adopt does, marked kept (upgrade.AnnotationPodKept): it holds the
// workspace, unlike a pod the attempt built, and a resume backs it up again.
func (c *cycler) keep(ctx context.Context, pod *corev1.Pod, d events.Data) error {
	return c.annotateForAttempt(ctx, pod, d, true)
}

func (c *cycler) annotateForAttempt(ctx context.Context, pod *corev1.Pod, d events.Data, kept bool) error {
	if pod.Annotations[upgrade.AnnotationPodAttempt] == d.Attempt && pod.Annotations[upgrade.AnnotationPodOps] == d.Ops.Name &&
		(!kept || pod.Annotations[upgrade.AnnotationPodKept] == d.Attempt) {
		return nil
	}
	annotations := map[string]any{upgrade.AnnotationPodAttempt: d.Attempt, upgrade.AnnotationPodOps: nil,
		upgrade.AnnotationPodTakenAt: c.now().UTC().Format(time.RFC3339)}
	if d.Ops.Name != "" {
		annotations[upgrade.AnnotationPodOps] = d.Ops.Name
	}
	if kept {
		annotations[upgrade.AnnotationPodKept] = d.Attempt
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID, // precondition: only this pod
		"annotations": annotations,
	}})
	if err != nil {
		return fmt.Errorf("encode annotations of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	_, err = c.kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("annotate pod %s/%s with attempt %s: %w", pod.Namespace, pod.Name, d.Attempt, err)
	}
	return nil
}

// livePod reads the pod from the API server (not the cache): the handler decides what to
// delete and create on it.
func (c *cycler) livePod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	pod, err := c.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
	}
	return pod, nil
}

// waitNameFree waits until the pod cache holds no pod of that name with oldUID, for at
// most nameFreeWait: woken by the informer's delete of that name, or its replacement by a
// pod of another UID (podGone), and looking
// again every nameFreePoll in case a wake-up was missed.
func (c *cycler) waitNameFree(ctx context.Context, ns, name string, oldUID types.UID) error {
	deadline := time.NewTimer(nameFreeWait)
	defer deadline.Stop()
	for {
		gone, stop := c.gone.wait(ns + "/" + name)
		pod, err := c.pods.Pods(ns).Get(name)
		switch {
		case apierrors.IsNotFound(err):
			stop()
			return nil
		case err != nil:
			stop()
			return fmt.Errorf("wait for old pod %s/%s (uid %s) to go: %w", ns, name, oldUID, err)
		case pod.UID != oldUID:
			stop()
			return nil
		}
		select {
		case <-gone:
		case <-time.After(nameFreePoll):
		case <-deadline.C:
			stop()
			return fmt.Errorf("wait for old pod %s/%s (uid %s) to go: still there after %s%s", ns, name, oldUID, nameFreeWait, stuckPod(pod))
		case <-ctx.Done():
			stop()
			return fmt.Errorf("wait for old pod %s/%s (uid %s) to go: %w", ns, name, oldUID, ctx.Err())
		}
		stop()
	}
}

// stuckPod says what holds pod, an old pod whose name is not free yet, and
// the way on: its delete (when), its grace period, its node and finalizers.
func stuckPod(pod *corev1.Pod) string {
	if pod.DeletionTimestamp == nil {
		return fmt.Sprintf(" and not being deleted (its delete was not seen yet; kubectl describe pod %s -n %s)", pod.Name, pod.Namespace)
	}
	grace := int64(0)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = *pod.DeletionGracePeriodSeconds
	}
	since := fmt.Sprintf(" (deleting since %s, grace period %ds)", pod.DeletionTimestamp.UTC().Format(time.RFC3339), grace)
	if len(pod.Finalizers) > 0 {
		return fmt.Sprintf("%s: finalizers %v hold it; once their controller is done with it (or is gone), removing them frees the name, and the new pod is built", since, pod.Finalizers)
	}
	return fmt.Sprintf("%s: the kubelet of node %q has not confirmed its containers stopped; once you are sure they did (a node that is gone), kubectl delete pod %s -n %s --grace-period=0 --force frees the name, and the new pod is built",
		since, pod.Spec.NodeName, pod.Name, pod.Namespace)
}

// stillToReplace reads sb again from the API server and says why its pod must no longer
// be replaced by attempt d ("" when it must): the sandbox is gone, replaced or being
// deleted, no longer claimed by d's ops, or d's attempt already ended.
func (c *cycler) stillToReplace(ctx context.Context, sb *agentsv1alpha1.Sandbox, d events.Data) (string, error) {
	fresh, err := c.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Get(ctx, sb.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "the sandbox is gone", nil
	case err != nil:
		return "", fmt.Errorf("read sandbox %s/%s again after its checkpoint: %w", sb.Namespace, sb.Name, err)
	case fresh.UID != sb.UID || fresh.DeletionTimestamp != nil:
		return "the sandbox was deleted or replaced", nil
	case !upgrade.ClaimedBy(fresh, d.Ops.Name, d.Attempt):
		return "the sandbox is no longer claimed by ops " + d.Ops.Name + " (attempt " + d.Attempt + ")", nil
	}
	if reason, ok := upgrade.ReasonFor(fresh, d.Attempt); ok && upgrade.Terminal(reason) {
		return "the attempt already ended in " + reason, nil
	}
	return "", nil
}

// originalPodRuns reports whether old is the sandbox's original pod, still
// running: not being deleted, and built by neither this attempt nor a failed
// one it continues. A checkpoint error while it runs is the checkpoint's
// failure, filed before anything was touched.
func originalPodRuns(old *corev1.Pod, sb *agentsv1alpha1.Sandbox, d events.Data) bool {
	return old != nil && old.DeletionTimestamp == nil && !upgrade.BuiltBy(old, d.Attempt) &&
		!upgrade.BuiltByResumed(old, sb, d.Attempt, d.ResumedAttempt)
}

// quotaRefused reports whether err is the API server refusing a pod for a
// ResourceQuota's "exceeded quota".
func quotaRefused(err error) bool {
	var status apierrors.APIStatus
	return apierrors.IsForbidden(err) && errors.As(err, &status) && upgrade.QuotaExceeded(status.Status().Message)
}
