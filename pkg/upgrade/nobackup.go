package upgrade

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// AnnotationNoBackup is the SandboxUpdateOps annotation the selector writes,
// in the same write as spec.paused: true, when it pauses an ops before its
// first sandbox because Unprotected names some: its value names them.
// Written once; once there, the selector never pauses the ops for it again,
// so resuming the ops is how a user says those workspaces may go. A
// `kubectl molt retry` does not copy it: the retry pauses again while any
// sandbox it would start has no backup.
const AnnotationNoBackup = "molt.dev/no-backup"

// AnnotationNoBackupPausedAt is written with AnnotationNoBackup: the ops's
// metadata.generation once paused by that write, and its UID (PausedAtValue). While the ops is still at
// it, the pause is molt's; a later pause is the user's own.
const AnnotationNoBackupPausedAt = "molt.dev/no-backup-paused-at"

// PausedForNoBackup returns AnnotationNoBackup's value when ops is paused by
// the selector's write of it and not resumed since.
func PausedForNoBackup(ops *agentsv1alpha1.SandboxUpdateOps) (string, bool) {
	return pausedBy(ops, AnnotationNoBackup, AnnotationNoBackupPausedAt)
}

// NoBackupNote is what AnnotationNoBackup's value v (the sandboxes it
// names) means to a user reading the ops's condition: why
// molt paused it, and the ways on.
func NoBackupNote(namespace, name, v string) string {
	return fmt.Sprintf("molt paused this ops before its first sandbox: it has no preUpgrade, and would give sandboxes a new pod with no backup of their workspace taken first, so their workspace would be lost: a restore finds nothing, or the backup an earlier upgrade took if that upgrade's postUpgrade kept it (work since then is lost). "+
		"If those workspaces may go, resume it (kubectl patch suo %s -n %s --type merge -p '{\"spec\":{\"paused\":false}}'); "+
		"to finish only the failed sandboxes, delete it and create it again with agents.kruise.io/upgrade-failed: \"true\" added to spec.selector.matchLabels; "+
		"to keep them, create it with the hooks that back up and restore them. The sandboxes: %s",
		name, namespace, strings.TrimSpace(v))
}

// WithoutBackup names the candidates of ops that would get a new pod with no
// backup taken first while its postUpgrade runs on them: the ops has a
// postUpgrade hook, no preUpgrade, a patch, and the Recreate strategy (a
// CheckpointRestore pod restores its checkpoint), and the sandbox is not
// resuming a failure after its backup. A sandbox whose last upgrade
// succeeded with a preUpgrade is named too: its workspace has lived in its pod
// since, and whether that upgrade's backup is still there for this ops's
// postUpgrade to restore is up to the hooks (guide 000's postUpgrade deletes
// it once restored, so its rollback ops restores nothing).
//
// sel.PodOf gives a candidate's pod (nil when it has none or it is not known):
// a failure after the backup whose original pod is still there (a new pod
// the API server refused before the old one was deleted) is resumed from
// PreUpgrade on it (ResumeAt), where this ops takes no backup of what it has
// held since the failed attempt's.
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
		if failed, reason, ok := FailedAttempt(c.Sandbox); c.Resume && ok && ResumeStage(reason) != agentsv1alpha1.UpgradingReasonPreUpgrade &&
			backedUp(c.Sandbox, failed) && !KeepsOriginalPod(c.Sandbox, sel.PodOf.of(c.Sandbox)) {
			continue // its backup was taken by the attempt it resumes
		}
		if c.Resume && RollbackKeepsPod(c.Sandbox, ops, sel.PodOf.of(c.Sandbox)) {
			continue // a rollback of a PreUpgradeFailed: the old pod is kept
		}
		names = append(names, c.Sandbox.Name)
	}
	return names
}

// backedUp reports whether failed, the failed attempt sb's status shows
// (failed after its preUpgrade stage), took a backup that a resume's
// postUpgrade restores: the lifecycle it ran, sb's spec.lifecycle (an ops's
// attempt writes the ops's there, a direct attempt runs the sandbox's own),
// has a preUpgrade. An attempt that itself resumed an earlier failure kept
// that one's backup, and is taken at its word. A direct upgrade of a
// sandbox with no preUpgrade that failed in UpgradePod took none: an ops
// resuming it with a postUpgrade would restore whatever older backup its
// hook finds over the workspace.
func backedUp(sb *agentsv1alpha1.Sandbox, failed string) bool {
	if lc := sb.Spec.Lifecycle; lc != nil && lc.PreUpgrade != nil {
		return true
	}
	_, _, resumes := Resumes(sb, failed)
	return resumes
}

// WithoutRestore names the candidates of ops, which has a patch and no hook
// at all (Recreate), that would get a new pod while their workspace lives in
// the old one: their last upgrade succeeded with a postUpgrade (it restored
// the workspace into the pod, so the pod holds it), and this ops neither
// backs it up nor restores it. Guide 001's rollback after a PreUpgradeFailed
// does this to the sandboxes that had upgraded.
func WithoutRestore(ops *agentsv1alpha1.SandboxUpdateOps, sel Selection) []string {
	lc := ops.Spec.Lifecycle
	if (lc != nil && (lc.PreUpgrade != nil || lc.PostUpgrade != nil)) || len(ops.Spec.Patch.Raw) == 0 ||
		ops.Spec.UpdateStrategy.Type == agentsv1alpha1.UpgradeTypeCheckpointRestore {
		return nil
	}
	var names []string
	for _, c := range sel.Candidates {
		if c.State != NotStarted || c.Sandbox.Spec.Lifecycle == nil || c.Sandbox.Spec.Lifecycle.PostUpgrade == nil {
			continue
		}
		if reason, ok := ReasonFor(c.Sandbox, CurrentAttempt(c.Sandbox)); ok && reason == agentsv1alpha1.UpgradingReasonSucceeded {
			names = append(names, c.Sandbox.Name)
		}
	}
	return names
}

// Unprotected names the candidates of ops whose workspace a new pod would
// lose: WithoutBackup's, else WithoutRestore's when ops also resumes a
// failed sandbox (a rollback or continue after a failure, as in guide 001;
// a later plain image bump of sandboxes once upgraded with hooks is the
// user's choice, and clears their spec.lifecycle, so it is not held).
func Unprotected(ops *agentsv1alpha1.SandboxUpdateOps, sel Selection) []string {
	if names := WithoutBackup(ops, sel); len(names) > 0 {
		return names
	}
	if !slices.ContainsFunc(sel.Candidates, func(c Candidate) bool { return c.Resume }) {
		return nil
	}
	return WithoutRestore(ops, sel)
}

// PodOf returns the pod a sandbox's controller reference proves its own,
// nil when it has none (or the caller cannot know).
type PodOf func(sb *agentsv1alpha1.Sandbox) *corev1.Pod

// of is p's answer for sb; nil when p is.
func (p PodOf) of(sb *agentsv1alpha1.Sandbox) *corev1.Pod {
	if p == nil {
		return nil
	}
	return p(sb)
}

// KeepsOriginalPod reports whether pod, sb's pod, is one that neither the
// failed attempt sb's status shows nor any it continued built (NewPodOf):
// the original pod, still there (its replacement was refused before it was
// deleted). A resume goes back to PreUpgrade on it (ResumeAt): its
// workspace has moved on since the failed attempt's backup.
func KeepsOriginalPod(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod) bool {
	if pod == nil || pod.DeletionTimestamp != nil {
		return false
	}
	failed := CurrentAttempt(sb)
	return originalPod(pod, append([]string{failed}, ResumedChain(sb, failed)...))
}

// RollbackKeepsPod reports whether ops, resuming sb's failure from before
// its backup, keeps pod, sb's pod: its patch gives the template the pod was
// built from (KeepsItsPod), and podcycler keeps a pod only when it is there,
// not going, Ready, and the attempt does not checkpoint (a CheckpointRestore
// attempt replaces it). A pod not known (nil) is not kept.
func RollbackKeepsPod(sb *agentsv1alpha1.Sandbox, ops *agentsv1alpha1.SandboxUpdateOps, pod *corev1.Pod) bool {
	return pod != nil && pod.DeletionTimestamp == nil && PodReady(pod) &&
		ops.Spec.UpdateStrategy.EffectiveType() != agentsv1alpha1.UpgradeTypeCheckpointRestore && KeepsItsPod(sb, ops.Spec.Patch.Raw)
}

// KeepsItsPod reports whether sb, resuming a failure from before its backup,
// keeps its pod under patch: the patched template is the one its pod was
// built from (OriginalTemplate), as a rollback to the old image makes it,
// so podcycler keeps the pod and nothing is lost.
func KeepsItsPod(sb *agentsv1alpha1.Sandbox, patch []byte) bool {
	orig, ok := OriginalTemplate(sb)
	if !ok || sb.Spec.Template == nil {
		return false
	}
	patched, err := ApplyPatch(sb.Spec.Template, patch)
	if err != nil {
		return false
	}
	want, err1 := Revision(orig)
	got, err2 := Revision(patched)
	return err1 == nil && err2 == nil && want == got
}
