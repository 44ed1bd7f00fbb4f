package upgrade

import (
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// WithoutBackup names the candidates of ops that would get a new pod with no
// backup taken first while its postUpgrade runs on them: the ops has a
// postUpgrade hook, no preUpgrade, a patch, and the Recreate strategy (a
// CheckpointRestore pod restores its checkpoint), and the sandbox is not
// resuming a failure after its backup. A sandbox whose last upgrade
// succeeded with a preUpgrade (its spec.lifecycle, which the patcher writes,
// has one) is left out: that preUpgrade took the backup a rollback's
// postUpgrade restores, as the guides' rollback ops mean.
func WithoutBackup(ops *agentsv1alpha1.SandboxUpdateOps, sel Selection) []string {
	lc := ops.Spec.Lifecycle
	if lc == nil || lc.PostUpgrade == nil || lc.PreUpgrade != nil || len(ops.Spec.Patch.Raw) == 0 ||
		ops.Spec.UpdateStrategy.Type == agentsv1alpha1.UpgradeTypeCheckpointRestore {
		return nil
	}
	var names []string
	for _, c := range sel.Candidates {
		if c.State != NotStarted {
			continue
		}
		if _, reason, ok := FailedAttempt(c.Sandbox); c.Resume && ok && ResumeStage(reason) != agentsv1alpha1.UpgradingReasonPreUpgrade {
			continue // its backup was taken by the attempt it resumes
		}
		if reason, ok := ReasonFor(c.Sandbox, CurrentAttempt(c.Sandbox)); ok && reason == agentsv1alpha1.UpgradingReasonSucceeded &&
			c.Sandbox.Spec.Lifecycle != nil && c.Sandbox.Spec.Lifecycle.PreUpgrade != nil {
			continue
		}
		names = append(names, c.Sandbox.Name)
	}
	return names
}
