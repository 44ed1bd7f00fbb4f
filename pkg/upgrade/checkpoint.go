package upgrade

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// CheckpointRestore keeps a sandbox's filesystem across the recreation of
// its pod: after preUpgrade, podcycler asks for a Checkpoint of the old pod
// (owned by the sandbox, persistentContents [filesystem]) and waits until a
// checkpointer marks it Succeeded or Failed; the new pod is created with the
// checkpoint's id (AnnotationRestoreFrom) and is reported Ready only once
// the checkpointer restored it (AnnotationRestored); when the attempt ends
// podcycler deletes the sandbox's checkpoints.

// AnnotationUpgradeStrategy is the Sandbox annotation the patcher writes,
// in the update that patches the template, when an ops upgrades the sandbox
// by CheckpointRestore: "<attempt> CheckpointRestore". Read by podcycler
// (checkpoint before the pod is replaced) and statusagg (prehook-done leads
// to Checkpointing); removed by podcycler with the attempt's checkpoints.
const AnnotationUpgradeStrategy = "molt.dev/upgrade-strategy"

// AnnotationRestoreFrom is the Pod annotation podcycler sets on a new pod
// built by CheckpointRestore: the checkpoint id to restore it from. Read by
// the checkpointer.
const AnnotationRestoreFrom = "molt.dev/restore-from"

// AnnotationRestored is the Pod annotation the checkpointer sets once it
// restored the checkpoint AnnotationRestoreFrom names into the pod (same
// value). podcycler reports the pod Ready only after it.
const AnnotationRestored = "molt.dev/restored"

// Restored reports whether pod holds what it was built to restore: it names
// no checkpoint to restore (AnnotationRestoreFrom), or the checkpointer has
// restored that one into it (AnnotationRestored). Until then the pod's
// workspace is empty, however Ready the pod is: no postUpgrade runs on it, and
// the checkpoint, the only copy of the workspace, is kept.
func Restored(pod *corev1.Pod) bool {
	from := pod.Annotations[AnnotationRestoreFrom]
	return from == "" || pod.Annotations[AnnotationRestored] == from
}

// LabelCheckpointAttempt is the Checkpoint label naming the attempt that
// asked for it (its hash: label values are short); LabelCheckpointSandbox
// names the sandbox. Written by podcycler; read by podcycler to find and
// delete a sandbox's checkpoints.
const (
	LabelCheckpointAttempt = "molt.dev/attempt-hash"
	LabelCheckpointSandbox = "molt.dev/sandbox"
)

// StrategyValue encodes AnnotationUpgradeStrategy for attempt.
func StrategyValue(attempt string) string {
	return attempt + " " + string(agentsv1alpha1.UpgradeTypeCheckpointRestore)
}

// ChecksPoint reports whether sb's attempt upgrades by CheckpointRestore:
// the patcher said so for this attempt, or (a direct upgrade) the sandbox's
// own upgradePolicy does.
func ChecksPoint(sb *agentsv1alpha1.Sandbox, attempt string) bool {
	if f := strings.Fields(sb.Annotations[AnnotationUpgradeStrategy]); len(f) == 2 && f[0] == attempt {
		return f[1] == string(agentsv1alpha1.UpgradeTypeCheckpointRestore)
	}
	return strings.HasPrefix(attempt, DirectAttemptPrefix) && sb.Spec.UpgradePolicy != nil &&
		sb.Spec.UpgradePolicy.Type == agentsv1alpha1.UpgradeTypeCheckpointRestore
}

// CheckpointFailedAfterBackup reports whether attempt, an ops's, whose
// status shows reason, failed in Checkpointing once its preUpgrade hook had
// backed the workspace up: the patcher writes the strategy mark for the
// attempt (AnnotationUpgradeStrategy) with the patch and the ops's hooks
// (spec.lifecycle), past its check of the patch's images, the one
// CheckpointFailed it files before preUpgrade. That backup is then the good
// one: a pod the sandbox gets before the resume (its old pod deleted or
// evicted since) starts empty and must not be backed up over it (ResumeAt),
// just as after UpgradePodFailed.
//
// Not a direct attempt: its mark is written before the patcher's image check
// of a redelivery, and a pod taken for its own would skip that check on the
// resume of a later template edit (a checkpoint restored onto a new image).
// Not without a preUpgrade hook: nothing was backed up, and the pod holds
// what the sandbox has.
func CheckpointFailedAfterBackup(sb *agentsv1alpha1.Sandbox, attempt, reason string) bool {
	lc := HooksFor(sb, attempt)
	return reason == agentsv1alpha1.UpgradingReasonCheckpointFailed && attempt != "" &&
		!strings.HasPrefix(attempt, DirectAttemptPrefix) &&
		lc != nil && lc.PreUpgrade != nil &&
		sb.Annotations[AnnotationUpgradeStrategy] == StrategyValue(attempt)
}

// AttemptHash is a short, label-safe name of an attempt.
func AttemptHash(attempt string) string {
	sum := sha256.Sum256([]byte(attempt))
	return hex.EncodeToString(sum[:])[:12]
}

// CheckpointName is the name of the Checkpoint of sandbox for attempt: one
// per attempt, so a failed checkpoint is never reused by a new attempt. A
// sandbox name longer than 40 characters is cut to 33 and a hash of the whole
// name is added: one ops gives its sandboxes one attempt, and the members
// of a pool differ only at the end of their names, so a bare cut would give
// two of them one Checkpoint.
func CheckpointName(sandbox, attempt string) string {
	name := sandbox
	if len(name) > 40 {
		sum := sha256.Sum256([]byte(sandbox))
		name = strings.TrimRight(name[:33], "-.") + "-" + hex.EncodeToString(sum[:])[:6]
	}
	return strings.TrimRight(name, "-.") + "-ckpt-" + AttemptHash(attempt)
}

// CheckpointKeptNote is what a failed UpgradePod of a CheckpointRestore
// attempt adds to its message, once the old pod is gone and the checkpoint
// is the workspace's only copy: a Recreate ops resuming it would build the
// new pod from an empty filesystem, so the next step names the strategy.
func CheckpointKeptNote(namespace, sandbox, checkpointID string) string {
	return "the old pod is gone and its workspace is kept in checkpoint " + checkpointID +
		" (kubectl get cp -n " + namespace + " -l " + LabelCheckpointSandbox + "=" + CheckpointSandboxLabel(sandbox) +
		"): " + checkpointKeptStep + ", which restores it (one of type Recreate starts the new pod from an empty filesystem)"
}

// checkpointKeptStep is the next step CheckpointKeptNote gives.
const checkpointKeptStep = "resume with a new SandboxUpdateOps of updateStrategy.type CheckpointRestore"

// CheckpointGoneNote is what a failed UpgradePod of a CheckpointRestore
// attempt adds to its message instead of CheckpointKeptNote when the
// checkpoint its new pod was to restore is gone (deleted before the restore)
// and so is the old pod: the note must not send the user to a checkpoint
// that is not there.
func CheckpointGoneNote(namespace, sandbox, checkpointID string) string {
	return "checkpoint " + checkpointID + ", which the new pod was to restore, is gone (deleted before the restore), and so is the old pod: " +
		checkpointGoneStep + " (kubectl get cp -n " + namespace + " -l " + LabelCheckpointSandbox + "=" + CheckpointSandboxLabel(sandbox) +
		"); without one, the workspace is lost, and an ops of type Recreate gives the sandbox a new pod"
}

// checkpointGoneStep is the next step CheckpointGoneNote gives.
const checkpointGoneStep = "a new SandboxUpdateOps of updateStrategy.type CheckpointRestore restores the newest checkpoint kept by the failed attempts this one continued, if there is one, and says so if there is none"

// HasCheckpointNote reports whether message carries CheckpointKeptNote or
// CheckpointGoneNote: it says where the workspace is, or that it is gone.
func HasCheckpointNote(message string) bool {
	return HasCheckpointKeptNote(message) || strings.Contains(message, checkpointGoneStep)
}

// HasCheckpointKeptNote reports whether message carries CheckpointKeptNote.
func HasCheckpointKeptNote(message string) bool {
	return strings.Contains(message, checkpointKeptStep)
}

// WithNote is message followed by "; " and note, message cut so that the
// note (the next step) survives the condition's length limit (cutMiddle).
func WithNote(message, note string) string {
	room := agentsv1alpha1.MaxConditionMessageLength - len(note) - len("; ")
	if room < 0 {
		return agentsv1alpha1.TruncateConditionMessage(note)
	}
	return agentsv1alpha1.TruncateConditionMessage(cutMiddle(message, room) + "; " + note)
}

// cutMark marks where cutMiddle took text out.
const cutMark = "…"

// cutMiddle is s within n bytes: whole, or its first quarter, cutMark and its
// end. The head says what failed; the end is where a hook's output tails end
// (agentruntime keeps each stream's last bytes), which says why: cut there, a
// message would show the start of a tail as if it were its end.
func cutMiddle(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= len(cutMark) {
		return agentsv1alpha1.TruncateConditionMessageTo(s, n)
	}
	head := agentsv1alpha1.TruncateConditionMessageTo(s, (n-len(cutMark))/4)
	cut := len(s) - (n - len(cutMark) - len(head))
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return head + cutMark + s[cut:]
}

// CheckpointSandboxLabel is the value of LabelCheckpointSandbox for the sandbox
// named name, the same for create, list and delete: the name itself when it fits in a
// label value, else its first 40 characters, "_" and 16 hex digits of its sha256. An
// object name never holds "_", so a shortened value never equals another sandbox's name.
func CheckpointSandboxLabel(name string) string {
	if len(name) <= content.LabelValueMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:40] + "_" + hex.EncodeToString(sum[:8])
}

// ChangedImages lists the containers and init containers whose image tpl
// changes from what pod runs, as "container <name>: <old> → <new>"; a
// container only one of them has is not a change of image, nor is the same
// image written another way (SameImage: a policy engine that pins the pod's
// images to digests, or spells out docker.io/library, changes nothing). A CheckpointRestore
// cannot restore a checkpoint onto a new image: an ops's patch that sets one is
// refused at apply (CEL), a direct attempt's template by the patcher with this.
func ChangedImages(pod *corev1.Pod, tpl *corev1.PodTemplateSpec) []string {
	if pod == nil || tpl == nil {
		return nil
	}
	var out []string
	for _, kind := range []struct {
		name      string
		running   []corev1.Container
		templated []corev1.Container
	}{
		{"initContainer", pod.Spec.InitContainers, tpl.Spec.InitContainers},
		{"container", pod.Spec.Containers, tpl.Spec.Containers},
	} {
		for _, want := range kind.templated {
			for _, have := range kind.running {
				if have.Name == want.Name && !SameImage(have.Image, want.Image) {
					out = append(out, kind.name+" "+want.Name+": "+have.Image+" → "+want.Image)
				}
			}
		}
	}
	return out
}

// SameImage reports whether two image references name the same image as far
// as a pod spec can tell: the same repository, once the Docker Hub defaults are
// spelled out (docker.io, library/, the latest tag), and the same tag when both
// have one, else the same digest when both have one. A reference pinned to a
// digest by an admission policy ("app:v1" → "app:v1@sha256:…") is the same
// image; one with only a digest, against one with only a tag, cannot be
// compared and is taken for the same (the check is there to stop a restore
// onto a new image the user wrote, not to second-guess the cluster's
// rewrites).
func SameImage(a, b string) bool {
	if a == b {
		return true
	}
	ra, ta, da := splitImage(a)
	rb, tb, db := splitImage(b)
	switch {
	case ra != rb:
		return false
	case ta != "" && tb != "":
		return ta == tb
	case da != "" && db != "":
		return da == db
	case ta == "" && da == "" || tb == "" && db == "":
		// No tag and no digest means the latest tag.
		return cmp.Or(ta, "latest") == cmp.Or(tb, "latest")
	default:
		return true
	}
}

// splitImage splits an image reference into its repository (with the Docker
// Hub defaults spelled out), tag and digest.
func splitImage(ref string) (repo, tag, digest string) {
	ref, digest, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref, tag = ref[:i], ref[i+1:]
	}
	first, rest, hasSlash := strings.Cut(ref, "/")
	if !hasSlash || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		// No registry host: Docker Hub, whose one-part names are library/.
		if !hasSlash {
			ref = "library/" + ref
		}
		ref = "docker.io/" + ref
	} else if first == "index.docker.io" {
		ref = "docker.io/" + rest
	}
	return ref, tag, digest
}

// RecreateOnly is the phrase every failure that a CheckpointRestore attempt
// cannot resume says (podcycler, patcher): no running pod to checkpoint and
// no checkpoint kept, a paused sandbox whose resume is not woken, an image
// change. A retry keeps the ops's strategy and would fail the same way.
const RecreateOnly = "updateStrategy.type Recreate"

// OnlyRecreateResumes names the sandboxes among failed (name → its Upgrading
// condition's message) that an ops of updateStrategy strategy cannot resume:
// under CheckpointRestore, those whose failure says only a Recreate can
// (RecreateOnly). Sorted; none under Recreate.
func OnlyRecreateResumes(strategy agentsv1alpha1.UpgradeType, failed map[string]string) []string {
	if strategy != agentsv1alpha1.UpgradeTypeCheckpointRestore {
		return nil
	}
	var out []string
	for name, message := range failed {
		if strings.Contains(message, RecreateOnly) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
