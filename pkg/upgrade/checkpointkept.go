package upgrade

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// AnnotationCheckpointKept is the SandboxUpdateOps annotation the selector
// writes, in the same write as spec.paused: true, when it pauses an ops
// before its first sandbox because CheckpointLeftBehind names some: its value
// names them. As AnnotationNoBackup: written once, and resuming the ops is
// how a user says those workspaces may go; `kubectl molt retry` does not copy
// it.
const AnnotationCheckpointKept = "molt.dev/checkpoint-kept"

// AnnotationCheckpointKeptPausedAt is written with AnnotationCheckpointKept:
// the ops's metadata.generation once paused by that write, and its UID
// (PausedAtValue).
const AnnotationCheckpointKeptPausedAt = "molt.dev/checkpoint-kept-paused-at"

// PausedForCheckpointKept returns AnnotationCheckpointKept's value when ops is
// paused by the selector's write of it and not resumed since.
func PausedForCheckpointKept(ops *agentsv1alpha1.SandboxUpdateOps) (string, bool) {
	return pausedBy(ops, AnnotationCheckpointKept, AnnotationCheckpointKeptPausedAt)
}

// CheckpointLeftBehind names the candidates of ops that resume a
// CheckpointRestore attempt which failed after their old pod was gone, when
// ops is not a CheckpointRestore itself: it would start their new pod from
// an empty filesystem and leave the checkpoint, the workspace's only copy,
// unused. A guide's "continue" or "rollback" ops, written without
// updateStrategy, is Recreate by default, so this is easy to do by mistake.
// Those are
//   - a failure that carries CheckpointKeptNote (UpgradePod's, once the old
//     pod is gone);
//   - a PostUpgradeFailed whose resume by ops rebuilds the pod
//     (rebuildsRestoredPod): the pod restored from the checkpoint, or yet to
//     be, holds the workspace.
//
// sel.PodOf gives a candidate's pod; when it is not known, a
// PostUpgradeFailed is taken as rebuilt (the pause errs to the safe side).
func CheckpointLeftBehind(ops *agentsv1alpha1.SandboxUpdateOps, sel Selection) []string {
	if ops.Spec.UpdateStrategy.Type == agentsv1alpha1.UpgradeTypeCheckpointRestore {
		return nil
	}
	var names []string
	for _, c := range sel.Candidates {
		if c.State != NotStarted || !c.Resume {
			continue
		}
		if cond := meta.FindStatusCondition(c.Sandbox.Status.Conditions, agentsv1alpha1.ConditionUpgrading); cond != nil &&
			agentsv1alpha1.IsUpgradingFailedReason(cond.Reason) && HasCheckpointKeptNote(cond.Message) ||
			rebuildsRestoredPod(c.Sandbox, ops, sel.PodOf.of(c.Sandbox)) {
			names = append(names, c.Sandbox.Name)
		}
	}
	return names
}

// rebuildsRestoredPod reports whether sb failed PostUpgrade in a
// CheckpointRestore attempt and ops, resuming it, would build its pod again
// (ResumeAt gives UpgradePod for pod, sb's pod, under ops's patch): the pod
// is gone, not Ready, not restored yet, or not of the patched template. Its
// workspace is in that pod, or only in the attempt's checkpoint.
func rebuildsRestoredPod(sb *agentsv1alpha1.Sandbox, ops *agentsv1alpha1.SandboxUpdateOps, pod *corev1.Pod) bool {
	failed, reason, ok := FailedAttempt(sb)
	if !ok || reason != agentsv1alpha1.UpgradingReasonPostUpgradeFailed || !ChecksPoint(sb, failed) || sb.Spec.Template == nil {
		return false
	}
	target := sb.Spec.Template
	if len(ops.Spec.Patch.Raw) > 0 {
		patched, err := ApplyPatch(sb.Spec.Template, ops.Spec.Patch.Raw)
		if err != nil {
			return false // the patcher fails it before the pod is touched
		}
		target = patched
	}
	revision, err := Revision(target)
	if err != nil {
		return false
	}
	chain := append([]string{failed}, ResumedChain(sb, failed)...)
	return ResumeAt(reason, chain, pod, revision) == agentsv1alpha1.UpgradingReasonUpgradePod
}

// CheckpointKeptPauseNote is what AnnotationCheckpointKept's value v (the
// sandboxes it names) means to a user reading the ops's condition: why molt
// paused it, and the ways on.
func CheckpointKeptPauseNote(namespace, name, v string) string {
	return fmt.Sprintf("molt paused this ops before its first sandbox: sandboxes %s failed a CheckpointRestore upgrade after their old pod was gone, so their workspace is kept only in a checkpoint (kubectl get cp -n %s) or a pod restored from it, and this ops, of updateStrategy.type %s, would start their new pod from an empty filesystem and leave the checkpoint unused. "+
		"To restore it, delete this ops and create it again with updateStrategy.type CheckpointRestore (its patch may set no container image, not even the same one); "+
		"if those workspaces may go, resume it (kubectl patch suo %s -n %s --type merge -p '{\"spec\":{\"paused\":false}}')",
		strings.TrimSpace(v), namespace, agentsv1alpha1.UpgradeTypeRecreate, name, namespace)
}
