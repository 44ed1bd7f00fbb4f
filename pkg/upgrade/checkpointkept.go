package upgrade

import (
	"fmt"
	"strings"

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
// CheckpointRestore attempt which failed after their old pod was gone (their
// failure carries CheckpointKeptNote: the workspace is only in a kept
// checkpoint), when ops is not a CheckpointRestore itself: it would start
// their new pod from an empty filesystem and leave the checkpoint unused. A
// guide's "continue" or "rollback" ops, written without updateStrategy, is
// Recreate by default, so this is easy to do by mistake.
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
			agentsv1alpha1.IsUpgradingFailedReason(cond.Reason) && HasCheckpointKeptNote(cond.Message) {
			names = append(names, c.Sandbox.Name)
		}
	}
	return names
}

// CheckpointKeptPauseNote is what AnnotationCheckpointKept's value v (the
// sandboxes it names) means to a user reading the ops's condition: why molt
// paused it, and the ways on.
func CheckpointKeptPauseNote(namespace, name, v string) string {
	return fmt.Sprintf("molt paused this ops before its first sandbox: sandboxes %s failed a CheckpointRestore upgrade after their old pod was gone, so their workspace is kept only in a checkpoint (kubectl get cp -n %s), and this ops, of updateStrategy.type %s, would start their new pod from an empty filesystem and leave the checkpoint unused. "+
		"To restore it, delete this ops and create it again with updateStrategy.type CheckpointRestore (its patch may set no container image, not even the same one); "+
		"if those workspaces may go, resume it (kubectl patch suo %s -n %s --type merge -p '{\"spec\":{\"paused\":false}}')",
		strings.TrimSpace(v), namespace, agentsv1alpha1.UpgradeTypeRecreate, name, namespace)
}
