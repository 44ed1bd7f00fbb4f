package upgrade

import (
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// A paused sandbox that an ops admits (its stateFilter has Paused) is
// upgraded in two phases: it is woken with its old template (Resuming, then
// ResumeSucceed), then patched and upgraded like a running one, and paused
// again when its attempt ends if spec.paused is still true. The selector
// marks it at admission with AnnotationUpgradeResumeTrigger; these two
// predicates are how every service reads that mark.

// WokenForUpgrade reports whether sb is a paused sandbox that an ops has
// admitted to be upgraded (spec.paused, the ops label and the resume
// trigger): the patcher waits for its old pod before patching, and statusagg
// files its `requested` as Resuming.
func WokenForUpgrade(sb *agentsv1alpha1.Sandbox) bool {
	return sb.Spec.Paused && sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" &&
		sb.Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger] == "true"
}

// AdmittedToWake reports whether an ops admitted sb to be woken for its
// upgrade (the ops label and the resume trigger), whether or not it is still
// paused: a sandbox its user unpaused after the admission has no pod either
// until podcycler builds one for the unpause. Until that pod is Ready nothing
// is patched (the patcher waits for it, statusagg files the attempt as
// Resuming, podcycler builds the pod from the template it ran before), so
// the backup is taken from it and no pod of the patched template starts on
// the volumes first.
func AdmittedToWake(sb *agentsv1alpha1.Sandbox) bool {
	return sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" &&
		sb.Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger] == "true"
}

// KeepAwake reports whether a paused sandbox must have a pod now, because
// an upgrade attempt on it has not ended:
//   - it is woken for an upgrade and the attempt its status shows has not
//     ended (none shown yet counts as not ended);
//   - or its user paused it while its attempt is in a stage. Stopping the pod
//     then would fail the stage for nothing (a hook with no pod to run in, a
//     new pod deleted as each re-drive creates it), so the pause waits for the
//     attempt, whose stages all have deadlines.
//
// podcycler creates and keeps the pod while this holds, and stops it, as for
// any pause, once the attempt succeeded or failed.
func KeepAwake(sb *agentsv1alpha1.Sandbox) bool {
	if !sb.Spec.Paused {
		return false
	}
	reason, ok := ReasonFor(sb, CurrentAttempt(sb))
	if WokenForUpgrade(sb) {
		return !ok || !Terminal(reason)
	}
	return ok && InProgress(reason)
}

// WakeAtAdmission reports whether the ops admitting sb must wake it first
// (the selector then sets AnnotationUpgradeResumeTrigger, else removes one
// an earlier ops left): the attempt begins with work on the sandbox's
// original pod, and a paused sandbox has none.
//   - a fresh upgrade of a sandbox stopped for its pause (phase Paused):
//     preUpgrade backs up the woken pod;
//   - the resume of a paused sandbox whose failed attempt ended in
//     PreUpgrade (PreUpgradeFailed): no backup was taken, so the resume needs
//     a pod to take it from.
//
// Any other resume of a paused sandbox continues from UpgradePod or later
// (ResumeAt) and builds the new pod itself. Woken there, the pod would be
// taken for the original one and backed up again, over the good backup of
// the failed attempt, from a workspace the pause already emptied. That
// holds for CheckpointFailed too: the checkpoint is taken after preUpgrade
// ran, so its backup is the good one. (The only CheckpointFailed filed
// before preUpgrade is the refusal of an image change, which touches
// nothing: the pause stopped a pod that was never backed up.)
//
// A later failure of a chain wakes it only when no attempt of the chain got
// past PreUpgrade: the template from before the chain's first patch is
// still kept (OriginalTemplate), or every earlier attempt the record names
// failed before its backup (ChainPastBackup: each failed wake-up, say). An
// attempt that failed in PreUpgrade after one that already replaced the
// pod, or one whose reason the record does not keep, leaves that one's
// backup as the good one. Such a resume is not woken.
//
// Woken while OriginalTemplate holds, the pod is built from that template
// (podcycler), not from spec.template, which carries the failed patch.
func WakeAtAdmission(sb *agentsv1alpha1.Sandbox) bool {
	if failed, reason, ok := FailedAttempt(sb); ok {
		if !sb.Spec.Paused || ResumeStage(reason) != agentsv1alpha1.UpgradingReasonPreUpgrade {
			return false
		}
		_, backupToTake := OriginalTemplate(sb)
		return backupToTake || !ChainPastBackup(ChainBehind(sb, failed))
	}
	return sb.Status.Phase == agentsv1alpha1.SandboxPaused
}
