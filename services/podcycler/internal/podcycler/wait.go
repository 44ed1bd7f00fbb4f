package podcycler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// watchUpgradedPod finishes the UpgradePod stage from the Pod informer, so no worker blocks
// while a pod starts:
//
//  1. skip unless the pod is the current attempt's to report on (reportSkip): not
//     being deleted, controlled by the sandbox, created by the attempt the sandbox's
//     status describes, the sandbox still labelled by the pod's ops, the attempt not
//     past UpgradePod, and under CheckpointRestore restoring a checkpoint;
//  2. judge the pod: Ready → publish pod-ready; a failed container or the deadline passed
//     → publish failed (UpgradePodFailed); still starting → look again at the deadline.
//
// An outcome already published for this pod is not published again by this process;
// after a restart it is published once more and dropped by the stream's duplicate window
// or ignored by its consumers, which check the world.
func (c *cycler) watchUpgradedPod(ctx context.Context, key string, sb *agentsv1alpha1.Sandbox, pod *corev1.Pod) error {
	attempt := pod.Annotations[upgrade.AnnotationPodAttempt]
	opsName := pod.Annotations[upgrade.AnnotationPodOps]
	if skip := reportSkip(sb, pod); skip != "" {
		if logger := klog.FromContext(ctx).V(4); attempt != "" && logger.Enabled() {
			logger.Info("Skip: "+skip, "ops", opsName, "attempt", attempt, "currentAttempt", upgrade.CurrentAttempt(sb), "currentOps", sb.Labels[agentsv1alpha1.LabelUpdateOps])
		}
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("ops", opsName, "attempt", attempt, "stage", agentsv1alpha1.UpgradingReasonUpgradePod)

	v := judge(pod, c.now(), c.readyTimeout)
	data := events.Data{
		Sandbox:        events.SandboxRef{Namespace: sb.Namespace, Name: sb.Name, UID: sb.UID},
		Attempt:        attempt,
		Stage:          agentsv1alpha1.UpgradingReasonUpgradePod,
		TargetRevision: pod.Labels[agentsv1alpha1.LabelPodTemplateHash],
		NewPodUID:      pod.UID,
		// The cache's copy shows the claim that the next stage checks.
		SandboxResourceVersion: sb.ResourceVersion,
	}
	if r, ok := c.redrives.Load(key); ok {
		if r := r.(redrive); r.attempt == attempt {
			data.Redrive = r.n
		} else {
			// A later attempt: the re-drive was of an earlier one.
			c.redrives.CompareAndDelete(key, r)
		}
	}
	if opsName != "" {
		data.Ops = events.OpsRef{Name: opsName, UID: types.UID(attempt)}
	}
	if v.outcome == podReady && opsName != "" {
		// The template edited since the pod was built from it, so that it
		// no longer carries the ops's patch: not counted as updated, as
		// the UpgradePod handler would not (patchUndone). Its handler may
		// have died before it could look.
		if message, err := c.readyButUndone(ctx, sb, pod, opsName, attempt); err != nil {
			return err
		} else if message != "" {
			v.outcome, v.message = podFailed, message
		}
	}
	var ev events.Event
	switch v.outcome {
	case podWaiting:
		c.ctl.EnqueueAfter(key, v.recheck)
		return nil
	case podReady:
		ev = events.Event{Type: events.TypePodReady, Data: data}
	case podFailed:
		data.Reason = agentsv1alpha1.UpgradingReasonUpgradePodFailed
		data.Message = v.message
		if id := pod.Annotations[upgrade.AnnotationRestoreFrom]; id != "" {
			data.Message = upgrade.WithNote(v.message, c.checkpointNote(ctx, sb, id))
		}
		ev = events.Event{Type: events.TypeFailed, Data: data}
	}

	mark := string(pod.UID) + "/" + ev.Type
	if prev, ok := c.reported.Load(key); ok && prev == mark {
		return nil
	}
	if err := c.publisher.Publish(ctx, ev); err != nil {
		return fmt.Errorf("report pod %s of sandbox %s: %w", pod.Name, key, err)
	}
	c.reported.Store(key, mark)
	if ev.Type == events.TypePodReady {
		logger.Info("Pod ready", "pod", klog.KObj(pod), "uid", pod.UID)
	} else {
		logger.Info("Pod failed", "pod", klog.KObj(pod), "uid", pod.UID, "message", data.Message)
	}
	return nil
}

// reportSkip says why watchUpgradedPod does not report on pod now ("" when it does):
//
//   - the pod is being deleted, is not controlled by sb, or was not created by an
//     upgrade (no molt.dev/attempt);
//   - it was created by another attempt than the one sb's status describes
//     (upgrade.CurrentAttempt): an older attempt's pod, whose ops may have been deleted
//     and created again under the same name, must not report over the current attempt.
//     A new attempt that continues on that pod at PostUpgrade gets its pod-ready from
//     the patcher (upgrade.ResumeAt), and again from the watchdog if it stalls; an
//     attempt's own pod that is Ready before the status names the attempt is reported
//     when it does (the status update syncs the sandbox again);
//   - sb is no longer labelled by the pod's ops (a later ops, or none, took it);
//   - the status already shows the attempt past UpgradePod;
//   - under CheckpointRestore the pod restores no checkpoint: Ready, it would pass for
//     restored with an empty workspace; the stage's handler replaces it (isAttemptPod).
func reportSkip(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod) string {
	attempt := pod.Annotations[upgrade.AnnotationPodAttempt]
	switch {
	case pod.DeletionTimestamp != nil || !ownedBy(pod, sb.UID) || attempt == "":
		return "not a live pod of an upgrade of this sandbox"
	case upgrade.CurrentAttempt(sb) != attempt:
		return "the pod was built by another attempt than the one the sandbox's status describes"
	case sb.Labels[agentsv1alpha1.LabelUpdateOps] != pod.Annotations[upgrade.AnnotationPodOps] &&
		!upgrade.LostLabelMidAttempt(sb, pod.Annotations[upgrade.AnnotationPodOps], types.UID(attempt)):
		// (Its label removed while the attempt is in a stage, it is still
		// the ops's: the selector puts the label back, unless the ops is
		// being deleted, whose release waits for it.)
		return "the sandbox no longer belongs to the ops that created its pod"
	}
	if reason, ok := upgrade.ReasonFor(sb, attempt); ok && upgrade.Past(reason, agentsv1alpha1.UpgradingReasonUpgradePod) {
		return "the attempt is already past UpgradePod"
	}
	if upgrade.ChecksPoint(sb, attempt) && pod.Annotations[upgrade.AnnotationRestoreFrom] == "" {
		return "the pod of a CheckpointRestore attempt restores no checkpoint; the UpgradePod handler replaces it"
	}
	return ""
}

// checkpointNote is the note a failed restore into a new pod adds: where the
// workspace is kept (the checkpoint id), or, when that checkpoint is gone
// (deleted before the restore), that it is, so the next step does not name a
// checkpoint that is not there. A list that fails counts as kept.
func (c *cycler) checkpointNote(ctx context.Context, sb *agentsv1alpha1.Sandbox, id string) string {
	if all, err := c.listCheckpoints(ctx, sb); err == nil && checkpointWithID(all, sb, id) == nil {
		return upgrade.CheckpointGoneNote(sb.Namespace, sb.Name, id)
	}
	return upgrade.CheckpointKeptNote(sb.Namespace, sb.Name, id)
}

// readyButUndone returns UpgradePod's failure for pod, Ready and built for the
// attempt of the ops named opsName, when sb's template changed since the pod
// was built (its revision is not the pod's) and no longer carries the ops's
// patch; "" otherwise. The ops is read only when the template changed.
func (c *cycler) readyButUndone(ctx context.Context, sb *agentsv1alpha1.Sandbox, pod *corev1.Pod, opsName, attempt string) (string, error) {
	target, err := upgrade.Revision(sb.Spec.Template)
	if err != nil || target == pod.Labels[agentsv1alpha1.LabelPodTemplateHash] {
		return "", nil
	}
	ops, undone, err := c.opsPatchUndone(ctx, sb, opsName, types.UID(attempt))
	if err != nil || undone == "" {
		return "", err
	}
	return undoneMessage(sb, ops, undone, pod, attempt, target), nil
}
