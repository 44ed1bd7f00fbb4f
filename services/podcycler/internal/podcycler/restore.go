package podcycler

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// Where the new pod of a CheckpointRestore attempt gets its workspace from.
//
// A sandbox's checkpoints are deleted only when its attempt Succeeded (cleanCheckpoints).
// After a failure they stay: the failed attempt may have deleted the pod the checkpoint
// was taken of, and then the checkpoint is the only copy of the workspace. The pods a
// failed attempt built (restoring that checkpoint, or not yet) are new pods: a checkpoint
// of one would be taken over the good one, and restoring it would lose the user's files.
//
// Checkpoints of other attempts are restored only by an attempt that continues a failed
// one (upgrade.Resumes), and only those the failed attempts since the last success took:
// any other is a leftover that a success did not get to clean, older than what the pod
// of that success held.

// restorePlan is what planRestore decides. Exactly one of from, fresh and problem is set.
type restorePlan struct {
	// from is the Succeeded Checkpoint the new pod restores.
	from *agentsv1alpha1.Checkpoint
	// fresh: the current pod holds the workspace; checkpoint it (the attempt's own
	// Checkpoint, upgrade.CheckpointName).
	fresh bool
	// problem says, for the user, why there is nothing to restore the new pod from.
	problem string
	// why says, for the log, how the plan was reached.
	why string
}

// planRestore decides where the new pod of sb's CheckpointRestore attempt restores from,
// given the sandbox's current pod (nil when it has none), the failed attempt this one
// continues ("" when none), the attempt's own Checkpoint (nil when it has none) and a
// lister of the sandbox's checkpoints, called only when the decision needs it:
//
//  1. the attempt's own Checkpoint Succeeded → it (a redelivery after the checkpoint
//     was taken, whatever happened to the pod since);
//  2. a live pod that names a checkpoint in restore-from:
//     - restored from it and not built by this attempt or the one it continues → the
//     pod has been the workspace since (built by an earlier upgrade that succeeded):
//     checkpoint it;
//     - otherwise, that checkpoint still exists and Succeeded → it (the pod was built
//     by the failed chain, or never got its files);
//     - otherwise, restored from it → checkpoint it (its files came from there);
//     - otherwise → as with no pod (4), but never checkpoint this pod, which holds
//     nothing;
//  3. a live pod with no restore-from: built by this attempt or the one it continues →
//     a new pod that was never restored: as with no pod (4), but checkpoint it when
//     nothing is left; else (the original pod) → checkpoint it;
//  4. no pod (or one being deleted): the attempt continues a failed one → the newest
//     Succeeded checkpoint that the failed attempts it continues took (keptBy); else →
//     nothing to restore.
//
// Only checkpoints controlled by sb (by UID) count: one of an earlier sandbox of the
// same name waits for the garbage collector, and is not this sandbox's workspace.
func planRestore(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod, attempt, resumed string, own *agentsv1alpha1.Checkpoint, list func() ([]agentsv1alpha1.Checkpoint, error)) (restorePlan, error) {
	if usableCheckpoint(own, sb) {
		return restorePlan{from: own, why: "this attempt's checkpoint succeeded"}, nil
	}
	var (
		listed []agentsv1alpha1.Checkpoint
		done   bool
	)
	checkpoints := func() ([]agentsv1alpha1.Checkpoint, error) {
		if done {
			return listed, nil
		}
		var err error
		listed, err = list()
		done = err == nil
		return listed, err
	}

	live := pod != nil && pod.DeletionTimestamp == nil
	madeHere := upgrade.BuiltBy(pod, attempt) || upgrade.BuiltByResumed(pod, sb, attempt, resumed)
	// lastResort: with nothing kept to restore, checkpoint the live pod anyway.
	lastResort := false
	// neverRestored: the live pod names a checkpoint that is gone and never reached it.
	neverRestored := ""
	switch {
	case !live:
	case pod.Annotations[upgrade.AnnotationRestoreFrom] != "":
		from := pod.Annotations[upgrade.AnnotationRestoreFrom]
		restored := pod.Annotations[upgrade.AnnotationRestored] == from
		if restored && !madeHere {
			return restorePlan{fresh: true, why: "the pod was restored by an earlier upgrade and holds the workspace since"}, nil
		}
		all, err := checkpoints()
		if err != nil {
			return restorePlan{}, err
		}
		if cp := checkpointWithID(all, sb, from); cp != nil {
			return restorePlan{from: cp, why: "the pod was built to restore this checkpoint, by a failed attempt or never restored"}, nil
		}
		if restored {
			return restorePlan{fresh: true, why: "the pod was restored from a checkpoint that is gone since"}, nil
		}
		neverRestored = from
	case madeHere:
		lastResort = true
	default:
		return restorePlan{fresh: true, why: "the pod holds the workspace"}, nil
	}

	if resumed != "" {
		all, err := checkpoints()
		if err != nil {
			return restorePlan{}, err
		}
		if cp := newestCheckpoint(keptBy(all, failedChain(sb, attempt, resumed)), sb); cp != nil {
			return restorePlan{from: cp, why: "the newest checkpoint kept by the failed attempts this one continues"}, nil
		}
	}
	switch {
	case lastResort:
		return restorePlan{fresh: true, why: "the pod was built by the failed attempt and no checkpoint is kept: checkpointing what it holds"}, nil
	case neverRestored != "":
		return restorePlan{problem: fmt.Sprintf("pod %s (uid %s) of sandbox %s/%s was built to be restored from checkpoint %s, which was never restored into it and no longer exists, and no other checkpoint of the sandbox is kept: its files are lost; the pod was not changed: upgrade the sandbox with updateStrategy.type Recreate",
			pod.Name, pod.UID, sb.Namespace, sb.Name, neverRestored)}, nil
	}
	return restorePlan{problem: fmt.Sprintf("sandbox %s/%s has no running pod to checkpoint and no checkpoint of this attempt succeeded; its files are gone with its pod: upgrade it with updateStrategy.type Recreate", sb.Namespace, sb.Name)}, nil
}

// usableCheckpoint reports whether cp can be restored into a pod of sb: it Succeeded
// with an id, is not being deleted, and is controlled by sb (by UID).
func usableCheckpoint(cp *agentsv1alpha1.Checkpoint, sb *agentsv1alpha1.Sandbox) bool {
	return cp != nil && cp.DeletionTimestamp == nil && metav1.IsControlledBy(cp, sb) &&
		cp.Status.Phase == agentsv1alpha1.CheckpointSucceeded && cp.Status.CheckpointID != ""
}

// checkpointWithID returns the usable checkpoint of sb among all whose id is id.
func checkpointWithID(all []agentsv1alpha1.Checkpoint, sb *agentsv1alpha1.Sandbox, id string) *agentsv1alpha1.Checkpoint {
	for i := range all {
		if cp := &all[i]; usableCheckpoint(cp, sb) && cp.Status.CheckpointID == id {
			return cp
		}
	}
	return nil
}

// failedChain is the failed attempts that attempt continues, resumed first: the
// attempts since the sandbox's last success (upgrade.ResumedChain).
func failedChain(sb *agentsv1alpha1.Sandbox, attempt, resumed string) []string {
	chain := upgrade.ResumedChain(sb, attempt)
	if !slices.Contains(chain, resumed) {
		chain = append([]string{resumed}, chain...)
	}
	return chain
}

// keptBy returns the checkpoints among all that one of attempts took (by their
// upgrade.LabelCheckpointAttempt). A checkpoint of any other attempt is older than the
// last success, whose pod held the workspace since: it is a leftover, and restoring it
// would bring back old files.
func keptBy(all []agentsv1alpha1.Checkpoint, attempts []string) []agentsv1alpha1.Checkpoint {
	var out []agentsv1alpha1.Checkpoint
	for _, cp := range all {
		if slices.ContainsFunc(attempts, func(a string) bool { return cp.Labels[upgrade.LabelCheckpointAttempt] == upgrade.AttemptHash(a) }) {
			out = append(out, cp)
		}
	}
	return out
}

// newestCheckpoint returns the usable checkpoint of sb among all created last (by
// creationTimestamp, then name, so the choice does not depend on the list's order).
func newestCheckpoint(all []agentsv1alpha1.Checkpoint, sb *agentsv1alpha1.Sandbox) *agentsv1alpha1.Checkpoint {
	var newest *agentsv1alpha1.Checkpoint
	for i := range all {
		cp := &all[i]
		if !usableCheckpoint(cp, sb) {
			continue
		}
		if newest == nil || newest.CreationTimestamp.Before(&cp.CreationTimestamp) ||
			(newest.CreationTimestamp.Equal(&cp.CreationTimestamp) && newest.Name < cp.Name) {
			newest = cp
		}
	}
	return newest
}

// resumedAttempt is the failed attempt that attempt continues ("" when none): as its
// event says (fromEvent), or else as the sandbox's durable record says (upgrade.Resumes).
func resumedAttempt(sb *agentsv1alpha1.Sandbox, attempt, fromEvent string) string {
	if fromEvent != "" {
		return fromEvent
	}
	failed, _, _ := upgrade.Resumes(sb, attempt)
	return failed
}
