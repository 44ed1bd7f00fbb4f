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
//  1. skip a pod being deleted, controlled by another sandbox, or not created by an
//     upgrade (no molt.dev/attempt);
//  2. skip if the sandbox no longer belongs to the pod's ops (a later ops, or none, took it);
//  3. skip if the status already shows the attempt past UpgradePod;
//  4. judge the pod: Ready → publish pod-ready; a failed container or the deadline passed
//     → publish failed (UpgradePodFailed); still starting → look again at the deadline.
//
// An outcome already published for this pod is not published again by this process;
// after a restart it is published once more and dropped by the stream's duplicate window
// or ignored by its consumers, which check the world.
func (c *cycler) watchUpgradedPod(ctx context.Context, key string, sb *agentsv1alpha1.Sandbox, pod *corev1.Pod) error {
	attempt := pod.Annotations[upgrade.AnnotationPodAttempt]
	if pod.DeletionTimestamp != nil || !ownedBy(pod, sb.UID) || attempt == "" {
		return nil
	}
	opsName := pod.Annotations[upgrade.AnnotationPodOps]
	logger := klog.FromContext(ctx).WithValues("ops", opsName, "attempt", attempt, "stage", agentsv1alpha1.UpgradingReasonUpgradePod)
	if current := sb.Labels[agentsv1alpha1.LabelUpdateOps]; current != opsName {
		logger.V(4).Info("Skip: sandbox no longer belongs to the ops that created its pod", "currentOps", current)
		return nil
	}
	if reason, ok := upgrade.ReasonFor(sb, attempt); ok && upgrade.Past(reason, agentsv1alpha1.UpgradingReasonUpgradePod) {
		logger.V(4).Info("Skip: attempt already past UpgradePod", "reason", reason)
		return nil
	}

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
		data.Redrive = r.(int)
	}
	if opsName != "" {
		data.Ops = events.OpsRef{Name: opsName, UID: types.UID(attempt)}
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
