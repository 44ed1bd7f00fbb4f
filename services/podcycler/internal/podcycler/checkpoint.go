package podcycler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// checkpointPoll is how often the Checkpoint's status is read while waiting.
const checkpointPoll = 500 * time.Millisecond

// checkpoint is the Checkpointing stage of a CheckpointRestore attempt, run
// by replacePod before the old pod is touched:
//
//  1. the attempt's Checkpoint (upgrade.CheckpointName: one per attempt, so
//     a failed one is never reused) exists and Succeeded → its id;
//  2. otherwise, with no pod left to checkpoint → fail (nothing to restore);
//  3. report Checkpointing, create the Checkpoint of the old pod (owned by
//     the sandbox, persistentContents [filesystem]) unless it exists, and
//     wait, keeping the message alive, until a checkpointer marks it
//     Succeeded (→ its id) or Failed (→ its message), for at most
//     --pod-ready-timeout.
//
// A problem (not an error) fails the sandbox with CheckpointFailed; the old
// pod is untouched.
func (c *cycler) checkpoint(ctx context.Context, sb *agentsv1alpha1.Sandbox, old *corev1.Pod, d events.Data) (id, problem string, err error) {
	name := upgrade.CheckpointName(sb.Name, d.Attempt)
	cps := c.agents.AgentsV1alpha1().Checkpoints(sb.Namespace)
	cp, err := cps.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && cp.Status.Phase == agentsv1alpha1.CheckpointSucceeded && cp.Status.CheckpointID != "":
		return cp.Status.CheckpointID, "", nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", "", fmt.Errorf("get checkpoint %s/%s: %w", sb.Namespace, name, err)
	case old == nil || old.DeletionTimestamp != nil:
		return "", fmt.Sprintf("sandbox %s/%s has no running pod to checkpoint and no checkpoint of this attempt succeeded; its files are gone with its pod: upgrade it with updateStrategy.type Recreate", sb.Namespace, sb.Name), nil
	}
	started := events.Event{Type: events.TypeStageStarted, Data: stageData(d)}
	started.Data.Stage = agentsv1alpha1.UpgradingReasonCheckpointing
	if err := c.publisher.Publish(ctx, started); err != nil {
		return "", "", fmt.Errorf("report stage Checkpointing of sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	if apierrors.IsNotFound(err) {
		want := &agentsv1alpha1.Checkpoint{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: sb.Namespace,
				Labels:          map[string]string{upgrade.LabelCheckpointSandbox: sb.Name, upgrade.LabelCheckpointAttempt: upgrade.AttemptHash(d.Attempt)},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox"))},
			},
			Spec: agentsv1alpha1.CheckpointSpec{SandboxName: sb.Name, PodName: old.Name, PersistentContents: []string{"filesystem"}},
		}
		if _, err := cps.Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", "", fmt.Errorf("create checkpoint %s/%s of pod %s (uid %s): %w", sb.Namespace, name, old.Name, old.UID, err)
		}
		klog.FromContext(ctx).Info("Asked for a checkpoint", "checkpoint", klog.KRef(sb.Namespace, name), "pod", klog.KObj(old), "uid", old.UID)
	}
	waitCtx, cancel := context.WithTimeout(ctx, c.readyTimeout)
	defer cancel()
	tick := time.NewTicker(checkpointPoll)
	defer tick.Stop()
	for {
		cp, err := cps.Get(waitCtx, name, metav1.GetOptions{})
		switch {
		case err != nil && waitCtx.Err() == nil && !apierrors.IsNotFound(err):
			return "", "", fmt.Errorf("get checkpoint %s/%s: %w", sb.Namespace, name, err)
		case err != nil:
		case cp.Status.Phase == agentsv1alpha1.CheckpointSucceeded && cp.Status.CheckpointID != "":
			klog.FromContext(ctx).Info("Checkpoint succeeded", "checkpoint", klog.KObj(cp), "id", cp.Status.CheckpointID)
			return cp.Status.CheckpointID, "", nil
		case cp.Status.Phase == agentsv1alpha1.CheckpointFailed:
			return "", fmt.Sprintf("checkpoint %s of pod %s failed: %s; the old pod was not deleted and keeps running: fix the checkpointer's cause, then create a new SandboxUpdateOps (it takes a new checkpoint)", name, old.Name, cp.Status.Message), nil
		}
		select {
		case <-waitCtx.Done():
			if ctx.Err() != nil {
				return "", "", ctx.Err()
			}
			return "", fmt.Sprintf("checkpoint %s of pod %s was not taken within %s (--pod-ready-timeout): no checkpointer marked it Succeeded or Failed; the old pod was not deleted and keeps running: check the checkpointer (kubectl get cp %s -n %s -o yaml), then create a new SandboxUpdateOps", name, old.Name, c.readyTimeout, name, sb.Namespace), nil
		case <-tick.C:
		}
	}
}

// failCheckpoint ends the attempt in CheckpointFailed with message.
func (c *cycler) failCheckpoint(ctx context.Context, in events.Data, message string) error {
	return c.fail(ctx, in, agentsv1alpha1.UpgradingReasonCheckpointing, agentsv1alpha1.UpgradingReasonCheckpointFailed, message)
}

// cleanCheckpoints deletes the checkpoints of a CheckpointRestore attempt
// that ended (Succeeded or failed), then the attempt's strategy mark: a
// checkpoint is for one attempt, and a failed one is never reused.
func (c *cycler) cleanCheckpoints(ctx context.Context, sb *agentsv1alpha1.Sandbox) error {
	v, ok := sb.Annotations[upgrade.AnnotationUpgradeStrategy]
	if !ok {
		return nil
	}
	attempt := upgrade.CurrentAttempt(sb)
	if reason, ok := upgrade.ReasonFor(sb, attempt); !ok || !upgrade.Terminal(reason) || v != upgrade.StrategyValue(attempt) {
		return nil
	}
	cps := c.agents.AgentsV1alpha1().Checkpoints(sb.Namespace)
	sel := labels.SelectorFromSet(labels.Set{upgrade.LabelCheckpointSandbox: sb.Name}).String()
	if err := cps.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete checkpoints of sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, upgrade.AnnotationUpgradeStrategy))
	if _, err := c.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the upgrade strategy mark of sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	klog.FromContext(ctx).Info("Deleted the checkpoints of an ended CheckpointRestore attempt", "attempt", attempt)
	return nil
}
