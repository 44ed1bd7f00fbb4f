package upgrade

import (
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// AnnotationOwnLifecycle keeps, on a sandbox, the spec.lifecycle it had of
// its own before an ops wrote its hooks in their place (the patcher writes
// the ops's spec.lifecycle into each sandbox it upgrades, and hookrunner runs
// the sandbox's). Written by the patcher in the same patch as the ops's
// lifecycle, for a sandbox with hooks of its own or spec.upgradePolicy (its
// later direct upgrades run the sandbox's hooks); read by the selector, which
// puts the sandbox's own hooks back once the ops is done with it
// (OwnLifecycleBack) and removes the annotation in the same write. Its value
// is a KeptLifecycle in JSON.
const AnnotationOwnLifecycle = "molt.dev/own-lifecycle"

// KeptLifecycle is the value of AnnotationOwnLifecycle.
type KeptLifecycle struct {
	// Own is the sandbox's own spec.lifecycle (null: it had none).
	Own *agentsv1alpha1.SandboxLifecycle `json:"own"`
	// Written is the lifecycle the last ops wrote in its place (null: that
	// ops had none, and removed the sandbox's). A spec.lifecycle that is no
	// longer this one was changed by someone else since, and stays.
	Written *agentsv1alpha1.SandboxLifecycle `json:"written"`
}

// keptLifecycle reads sb's AnnotationOwnLifecycle (ok false when it has none,
// or one that cannot be read).
func keptLifecycle(sb *agentsv1alpha1.Sandbox) (KeptLifecycle, bool) {
	value, ok := sb.Annotations[AnnotationOwnLifecycle]
	if !ok {
		return KeptLifecycle{}, false
	}
	var kept KeptLifecycle
	if err := json.Unmarshal([]byte(value), &kept); err != nil {
		return KeptLifecycle{}, false
	}
	return kept, true
}

// KeepOwnLifecycle returns the AnnotationOwnLifecycle value to write beside
// written, the spec.lifecycle an ops writes into sb, or "" when nothing is to
// be kept: written is sb's lifecycle already, or sb has neither hooks of its
// own nor spec.upgradePolicy (its lifecycle is then run only by the ops that
// write theirs). The own lifecycle an earlier ops kept stays kept, unless the
// sandbox's spec.lifecycle was changed since that ops wrote it: that change
// (its removal too) is the sandbox's own now.
func KeepOwnLifecycle(sb *agentsv1alpha1.Sandbox, written *agentsv1alpha1.SandboxLifecycle) string {
	if equality.Semantic.DeepEqual(sb.Spec.Lifecycle, written) {
		return ""
	}
	own := sb.Spec.Lifecycle
	kept, ok := keptLifecycle(sb)
	_, present := sb.Annotations[AnnotationOwnLifecycle]
	switch {
	case ok && equality.Semantic.DeepEqual(sb.Spec.Lifecycle, kept.Written):
		own = kept.Own
	case present:
		// Changed since that ops wrote it (removed, too), or a value that
		// cannot be read: what it is now is the sandbox's own, written over
		// the stale value so that it does not come back.
	case writtenByAnOps(sb):
		// An earlier ops's hooks, left in place as it kept nothing (the
		// sandbox had no hooks of its own, nor spec.upgradePolicy): not the
		// sandbox's own either. Kept as its own, they would come back once
		// this ops is done: the hooks of an ops that failed, over those of
		// the one that fixed them (a walk's next direct upgrade ran them).
		own = nil
		if sb.Spec.UpgradePolicy == nil {
			return ""
		}
	case own == nil && sb.Spec.UpgradePolicy == nil:
		return ""
	}
	// Two pointers to structs of strings and ints always encode.
	b, _ := json.Marshal(KeptLifecycle{Own: own, Written: written})
	return string(b)
}

// writtenByAnOps reports whether sb's spec.lifecycle is the one an ops's
// attempt wrote over no hooks of the sandbox's own (AnnotationAttemptHooks
// with OverNone, of an attempt that is not direct), unchanged since.
func writtenByAnOps(sb *agentsv1alpha1.Sandbox) bool {
	pinned, ok := pinnedHooks(sb)
	if !ok || !pinned.OverNone || pinned.Attempt == "" || strings.HasPrefix(pinned.Attempt, DirectAttemptPrefix) {
		return false
	}
	return equality.Semantic.DeepEqual(sb.Spec.Lifecycle, pinned.Lifecycle)
}

// OwnsNoHooks reports whether sb has no hooks of its own now: its
// spec.lifecycle is empty, or an earlier ops's written over none
// (writtenByAnOps). Hooks kept aside in AnnotationOwnLifecycle are not
// looked at: KeepOwnLifecycle keeps them.
func OwnsNoHooks(sb *agentsv1alpha1.Sandbox) bool {
	return sb.Spec.Lifecycle == nil || writtenByAnOps(sb)
}

// OwnLifecycleBack says what becomes of sb's AnnotationOwnLifecycle once the
// ops that wrote its hooks is done with the sandbox (see OwnLifecycleDue):
// present is false when it has none; restore is true when its spec.lifecycle
// is still the one the ops wrote, and own then goes back in its place; else
// (changed since by someone, or an annotation that cannot be read: readable
// false) the annotation alone goes and spec.lifecycle stays as it is.
func OwnLifecycleBack(sb *agentsv1alpha1.Sandbox) (own *agentsv1alpha1.SandboxLifecycle, restore, present, readable bool) {
	if _, ok := sb.Annotations[AnnotationOwnLifecycle]; !ok {
		return nil, false, false, false
	}
	kept, ok := keptLifecycle(sb)
	if !ok {
		return nil, false, true, false
	}
	if !equality.Semantic.DeepEqual(sb.Spec.Lifecycle, kept.Written) {
		return nil, false, true, true
	}
	return kept.Own, true, true, true
}

// OwnLifecycleDue reports whether sb's own hooks may go back in place of an
// ops's: no ops that may still drive it claims it (holds is asked of the ops
// its label names, when it has one), it is not being deleted, the attempt
// its claim annotation names, if any, is the one its status shows, and its
// last attempt, if any, succeeded. One in a stage runs the ops's hooks to its end
// (preUpgrade's backup and postUpgrade's restore must be one pair); a failed
// one keeps them for the ops that resumes it, whose postUpgrade restores what
// that preUpgrade backed up.
func OwnLifecycleDue(sb *agentsv1alpha1.Sandbox, holds func(ops string) bool) bool {
	if sb.DeletionTimestamp != nil {
		return false
	}
	attempt := CurrentAttempt(sb)
	if claimed := sb.Labels[agentsv1alpha1.LabelUpdateOps]; claimed != "" {
		if holds(claimed) {
			return false
		}
		if _, claim := ClaimOf(sb); claim != "" && claim != attempt {
			// Admitted by an ops that has ended since (Failed on counts
			// that did not show it yet), its attempt not recorded yet: its
			// hooks may be running. (Without the label, the claim is what
			// an ended ops left behind a direct upgrade.)
			return false
		}
	}
	if attempt == "" {
		return true
	}
	reason, _ := ReasonFor(sb, attempt)
	return reason == agentsv1alpha1.UpgradingReasonSucceeded
}
