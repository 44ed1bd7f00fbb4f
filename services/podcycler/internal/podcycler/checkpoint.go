package podcycler

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// checkpointPoll is how often the Checkpoint's status is read while waiting.
const checkpointPoll = 500 * time.Millisecond

// checkpoint is the Checkpointing stage of a CheckpointRestore attempt, run
// by replacePod before the old pod is touched. It returns the id of the
// checkpoint the new pod restores:
//
//  1. read the attempt's own Checkpoint (upgrade.CheckpointName: one per
//     attempt, so a failed one is never reused); one controlled by an
//     earlier sandbox of the same name → retry (the garbage collector
//     deletes it);
//  2. decide where the workspace is (planRestore): a Succeeded checkpoint
//     to restore (the attempt's own, or one kept by the failed attempts it
//     continues) → its id, taking no new checkpoint; nothing to restore →
//     fail; the old pod holds the workspace → 3;
//  3. report Checkpointing, create the Checkpoint of the old pod (owned by
//     the sandbox, persistentContents [filesystem]) unless it exists, and
//     wait, keeping the message alive, until a checkpointer marks it
//     Succeeded (→ its id) or Failed (→ its message), for at most
//     --pod-ready-timeout. A create the API server refuses for good
//     (upgrade.Refusal: an admission policy, RBAC, validation) is a problem
//     at once, in the server's words.
//
// A problem (not an error) fails the sandbox with CheckpointFailed; the old
// pod is untouched.
func (c *cycler) checkpoint(ctx context.Context, sb *agentsv1alpha1.Sandbox, old *corev1.Pod, d events.Data) (id, problem string, err error) {
	name := upgrade.CheckpointName(sb.Name, d.Attempt)
	cps := c.agents.AgentsV1alpha1().Checkpoints(sb.Namespace)
	var listed []agentsv1alpha1.Checkpoint
	own, err := cps.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// Taken under another name (a molt before the names of long
		// sandbox names changed)? Found by its labels.
		if listed, err = c.listCheckpoints(ctx, sb); err != nil {
			return "", "", err
		}
		if own = takenBy(listed, sb, d.Attempt); own != nil {
			name = own.Name
		}
	case err != nil:
		return "", "", fmt.Errorf("get checkpoint %s/%s: %w", sb.Namespace, name, err)
	case !metav1.IsControlledBy(own, sb):
		return "", "", fmt.Errorf("checkpoint %s/%s is not controlled by sandbox %s/%s (uid %s): it belongs to an earlier sandbox of that name and waits for the garbage collector", sb.Namespace, name, sb.Namespace, sb.Name, sb.UID)
	}
	plan, err := planRestore(sb, old, d.Attempt, resumedAttempt(sb, d.Attempt, d.ResumedAttempt), own, func() ([]agentsv1alpha1.Checkpoint, error) {
		if listed != nil {
			return listed, nil
		}
		return c.listCheckpoints(ctx, sb)
	})
	switch {
	case err != nil:
		return "", "", err
	case plan.from != nil:
		// A direct attempt's mark, as for a new checkpoint: once it
		// succeeds, the kept checkpoints it restored are cleaned up.
		if err := c.markDirectCheckpointRestore(ctx, sb, d.Attempt); err != nil {
			return "", "", err
		}
		klog.FromContext(ctx).Info("Restoring from a checkpoint taken before", "checkpoint", klog.KObj(plan.from), "id", plan.from.Status.CheckpointID, "why", plan.why)
		return plan.from.Status.CheckpointID, "", nil
	case plan.problem != "":
		return "", plan.problem, nil
	}
	klog.FromContext(ctx).V(2).Info("Checkpointing the pod", "pod", klog.KObj(old), "uid", old.UID, "why", plan.why)
	started := events.Event{Type: events.TypeStageStarted, Data: stageData(d)}
	started.Data.Stage = agentsv1alpha1.UpgradingReasonCheckpointing
	if err := c.publisher.Publish(ctx, started); err != nil {
		return "", "", fmt.Errorf("report stage Checkpointing of sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	if own == nil {
		if err := c.markDirectCheckpointRestore(ctx, sb, d.Attempt); err != nil {
			return "", "", err
		}
		want := &agentsv1alpha1.Checkpoint{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: sb.Namespace,
				Labels:          map[string]string{upgrade.LabelCheckpointSandbox: upgrade.CheckpointSandboxLabel(sb.Name), upgrade.LabelCheckpointAttempt: upgrade.AttemptHash(d.Attempt)},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox"))},
			},
			Spec: agentsv1alpha1.CheckpointSpec{SandboxName: sb.Name, PodName: old.Name, PersistentContents: []string{"filesystem"}},
		}
		_, err := cps.Create(ctx, want, metav1.CreateOptions{})
		if words := upgrade.Refusal(err); words != "" {
			// The same create gets the same answer until a person changes
			// something: fail now, in the server's words, not after
			// redeliveries minutes apart.
			return "", fmt.Sprintf("the API server refused checkpoint %s of pod %s of sandbox %s/%s: %s; nothing was checkpointed, and podcycler did not delete the old pod: fix the cause (an admission policy or webhook, podcycler's RBAC, a quota on checkpoints), then create a new SandboxUpdateOps",
				name, old.Name, sb.Namespace, sb.Name, words), nil
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
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
		case (apierrors.IsNotFound(err) || (err == nil && cp.DeletionTimestamp != nil)) && waitCtx.Err() == nil:
			// It existed (read, or created above; a read after a create is
			// never stale): someone deleted it, or the garbage collector did
			// with its sandbox. Waiting longer cannot end well, and one being
			// deleted (held by a checkpointer's finalizer) is no checkpoint
			// to restore from, Succeeded or not.
			return "", fmt.Sprintf("checkpoint %s of pod %s was deleted before podcycler could restore from it (taken or not); podcycler did not delete the old pod: create a new SandboxUpdateOps to checkpoint it again (nothing to do if the sandbox itself is being deleted)", name, old.Name), nil
		case err != nil:
		case cp.Status.Phase == agentsv1alpha1.CheckpointSucceeded && cp.Status.CheckpointID != "":
			klog.FromContext(ctx).Info("Checkpoint succeeded", "checkpoint", klog.KObj(cp), "id", cp.Status.CheckpointID)
			return cp.Status.CheckpointID, "", nil
		case cp.Status.Phase == agentsv1alpha1.CheckpointFailed:
			if gone, err := c.checkpointedPodGone(ctx, old); err != nil {
				return "", "", err
			} else if gone {
				// The checkpointer failed because its pod went (a user's
				// delete, an eviction): blaming the checkpointer would send the
				// user to fix what is not broken.
				return "", fmt.Sprintf("pod %s (uid %s) was deleted while checkpoint %s was being taken, not by podcycler, and the checkpoint failed with it (%s): what the pod held outside volumes is lost; the sandbox gets a new pod from its template, without those files: restore them from a backup if you have one, then create a new SandboxUpdateOps to upgrade it",
					old.Name, old.UID, name, cp.Status.Message), nil
			}
			return "", fmt.Sprintf("checkpoint %s of pod %s failed: %s; podcycler did not delete the old pod: fix the checkpointer's cause, then create a new SandboxUpdateOps (it takes a new checkpoint)", name, old.Name, cp.Status.Message), nil
		}
		select {
		case <-waitCtx.Done():
			if ctx.Err() != nil {
				return "", "", ctx.Err()
			}
			return "", fmt.Sprintf("checkpoint %s of pod %s was not taken within %s (--pod-ready-timeout): no checkpointer marked it Succeeded or Failed; podcycler did not delete the old pod: check the checkpointer (kubectl get cp %s -n %s -o yaml), then create a new SandboxUpdateOps", name, old.Name, c.readyTimeout, name, sb.Namespace), nil
		case <-tick.C:
		}
	}
}

// checkpointedPodGone reports, from the API server (livePod), whether pod
// (by UID) no longer exists or is being deleted.
func (c *cycler) checkpointedPodGone(ctx context.Context, pod *corev1.Pod) (bool, error) {
	now, err := c.livePod(ctx, pod.Namespace, pod.Name)
	if err != nil {
		return false, err
	}
	return now == nil || now.UID != pod.UID || now.DeletionTimestamp != nil, nil
}

// pausedCheckpointNote is added to a paused sandbox's checkpoint failure:
// its pod stops with the pause once the attempt ends, and a resume after
// CheckpointFailed is not woken (upgrade.WakeAtAdmission: the backup is
// taken), so a CheckpointRestore resume would find no pod to checkpoint.
const pausedCheckpointNote = "the sandbox is paused, so its pod stops again now and a resume is not woken: " +
	"resume it with a SandboxUpdateOps of updateStrategy.type Recreate (it builds the new pod, and postUpgrade restores what preUpgrade backed up), not CheckpointRestore, which would find no pod to checkpoint and no checkpoint to restore"

// failCheckpoint ends the attempt in CheckpointFailed with message.
func (c *cycler) failCheckpoint(ctx context.Context, in events.Data, message string) error {
	return c.fail(ctx, in, agentsv1alpha1.UpgradingReasonCheckpointing, agentsv1alpha1.UpgradingReasonCheckpointFailed, message)
}

// cleanCheckpoints deletes the checkpoints of a sandbox whose CheckpointRestore
// attempt Succeeded (checkpointsDone: its own, and those of the failed attempts
// it continued), then the attempt's strategy mark, which says there is
// something to clean. After a failure they are kept: they hold the workspace
// that the attempt continuing it restores (planRestore).
//
// Only the checkpoints of those attempts are deleted (by their attempt hash):
// a newer attempt's, taken while this cache still shows the older success, is
// never touched. The mark is removed only if it still says what was read (a
// JSON patch test): a newer attempt's mark is never lost.
func (c *cycler) cleanCheckpoints(ctx context.Context, sb *agentsv1alpha1.Sandbox) error {
	mark, attempts, ok := checkpointsDone(sb)
	if !ok {
		return nil
	}
	hashes := make([]string, len(attempts))
	for i, a := range attempts {
		hashes[i] = upgrade.AttemptHash(a)
	}
	taken, err := labels.NewRequirement(upgrade.LabelCheckpointAttempt, selection.In, hashes)
	if err != nil {
		return fmt.Errorf("select the checkpoints of sandbox %s/%s to delete: %w", sb.Namespace, sb.Name, err)
	}
	sel := labels.SelectorFromSet(labels.Set{upgrade.LabelCheckpointSandbox: upgrade.CheckpointSandboxLabel(sb.Name)}).Add(*taken).String()
	cps := c.agents.AgentsV1alpha1().Checkpoints(sb.Namespace)
	if err := cps.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete checkpoints of sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	path := "/metadata/annotations/" + upgrade.PointerToken(upgrade.AnnotationUpgradeStrategy)
	patch, err := json.Marshal([]map[string]string{{"op": "test", "path": path, "value": mark}, {"op": "remove", "path": path}})
	if err != nil {
		return fmt.Errorf("encode the removal of the upgrade strategy mark of sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	_, err = c.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	switch {
	case apierrors.IsInvalid(err):
		klog.FromContext(ctx).Info("Left the upgrade strategy mark: it no longer holds the value read (a newer attempt wrote its own, or it is gone)", "mark", mark, "err", err)
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("remove the upgrade strategy mark of sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	klog.FromContext(ctx).Info("Deleted the checkpoints of a succeeded CheckpointRestore attempt", "attempt", upgrade.CurrentAttempt(sb))
	return nil
}

// markDirectCheckpointRestore writes the strategy mark (upgrade.StrategyValue) of a
// direct CheckpointRestore attempt, before its first Checkpoint is created. The patcher
// writes it for an ops's attempt; a direct one (the sandbox's own upgradePolicy) has
// nobody else to write it, and without it cleanCheckpoints would never delete the
// attempt's checkpoints after it succeeded. A merge patch of one annotation: it cannot
// conflict with any other write.
func (c *cycler) markDirectCheckpointRestore(ctx context.Context, sb *agentsv1alpha1.Sandbox, attempt string) error {
	value := upgrade.StrategyValue(attempt)
	// An ops's attempt has its mark from the patcher; and a sandbox an ops
	// claims is never upgraded directly: a direct attempt's pod rebuilt
	// there (its failure still shown) must not overwrite the ops's mark.
	if !strings.HasPrefix(attempt, upgrade.DirectAttemptPrefix) || sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" ||
		sb.Annotations[upgrade.AnnotationUpgradeStrategy] == value {
		return nil
	}
	patch := upgrade.AnnotationPatch(upgrade.AnnotationUpgradeStrategy, value)
	if _, err := c.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("write the upgrade strategy mark %q of sandbox %s/%s before its checkpoint: %w", value, sb.Namespace, sb.Name, err)
	}
	return nil
}

// checkpointsDone returns sb's strategy mark, and the attempts whose
// checkpoints are no longer needed, when the CheckpointRestore attempt the
// mark names is the current one and Succeeded: its pod holds the workspace,
// restored from its own checkpoint or one the failed attempts it continued
// (upgrade.ResumedChain) kept, so theirs go too. After a success of another
// strategy (a Recreate ops that resumed a failed CheckpointRestore), the
// checkpoints are kept: its new pod may have started from an empty
// filesystem, and one of them may be the workspace's only copy (planRestore
// never restores them again unless a failure of the chain they belong to is
// resumed).
func checkpointsDone(sb *agentsv1alpha1.Sandbox) (mark string, attempts []string, ok bool) {
	mark, ok = sb.Annotations[upgrade.AnnotationUpgradeStrategy]
	if !ok {
		return "", nil, false
	}
	attempt := upgrade.CurrentAttempt(sb)
	if reason, ok := upgrade.ReasonFor(sb, attempt); !ok || reason != agentsv1alpha1.UpgradingReasonSucceeded || mark != upgrade.StrategyValue(attempt) {
		return "", nil, false
	}
	return mark, append([]string{attempt}, upgrade.ResumedChain(sb, attempt)...), true
}

// takenBy returns the checkpoint among all that attempt took of sb (by its attempt
// label, controlled by sb), nil when there is none.
func takenBy(all []agentsv1alpha1.Checkpoint, sb *agentsv1alpha1.Sandbox, attempt string) *agentsv1alpha1.Checkpoint {
	for i := range all {
		if cp := &all[i]; cp.Labels[upgrade.LabelCheckpointAttempt] == upgrade.AttemptHash(attempt) && metav1.IsControlledBy(cp, sb) {
			return cp
		}
	}
	return nil
}

// listCheckpoints returns the checkpoints labelled with sb's name (which may
// include some of an earlier sandbox of that name: planRestore checks the
// owner).
func (c *cycler) listCheckpoints(ctx context.Context, sb *agentsv1alpha1.Sandbox) ([]agentsv1alpha1.Checkpoint, error) {
	sel := labels.SelectorFromSet(labels.Set{upgrade.LabelCheckpointSandbox: upgrade.CheckpointSandboxLabel(sb.Name)}).String()
	list, err := c.agents.AgentsV1alpha1().Checkpoints(sb.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints of sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	return list.Items, nil
}
