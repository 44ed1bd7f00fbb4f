package upgrade

import (
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// A sandbox with spec.upgradePolicy that an ops left failed (phase
// Upgrading, a failed reason, the attempt an ops's UID) is continued by a
// direct attempt once the user changes its spec after the failure: the new
// template replaces the ops's target, and the attempt resumes from the failed
// step (ResumeAt), as a new ops would. Without such an edit it waits, as
// before, for a new ops: the failure alone never starts an upgrade the user
// did not ask for again.

// FailedByOps reports whether sb is left failed by an ops's attempt (not a
// direct one): IsResumable, with an attempt id that is not a direct one.
func FailedByOps(sb *agentsv1alpha1.Sandbox) bool {
	attempt := CurrentAttempt(sb)
	return IsResumable(sb) && attempt != "" && !strings.HasPrefix(attempt, DirectAttemptPrefix)
}

// SpecChangedSinceAttempt reports whether sb's spec changed after its
// current attempt's last transition was recorded: metadata.generation is
// past the one the UpgradeAttempt condition was written at. Only the user
// (and the patcher, while an attempt is in PreUpgrade, before it can fail
// past it) writes a sandbox's spec. A record without a generation (an older
// molt's) says nothing: false.
func SpecChangedSinceAttempt(sb *agentsv1alpha1.Sandbox) bool {
	a := meta.FindStatusCondition(sb.Status.Conditions, ConditionAttempt)
	return a != nil && a.ObservedGeneration > 0 && sb.Generation > a.ObservedGeneration
}

// AnnotationDirectHeld is the Sandbox annotation the selector writes when a
// sandbox that an ops left failed had its spec changed since (the user's
// edit of a sandbox with spec.upgradePolicy), and the edit is not rolled
// out directly: "<generation> <why and what to do>". statusagg shows it,
// while the sandbox is still failed by that ops at that generation, as the
// DirectUpgradeHeld condition, the status message and a Warning Event of
// that name. Removed by the selector when an attempt (direct or an ops's)
// starts.
const AnnotationDirectHeld = "molt.dev/direct-held"

// DirectHeldValue encodes AnnotationDirectHeld.
func DirectHeldValue(generation int64, why string) string {
	return strconv.FormatInt(generation, 10) + " " + agentsv1alpha1.TruncateConditionMessage(why)
}

// DirectHeld returns why sb's edit is not rolled out directly, as the
// selector recorded it for sb's current generation ("" when it did not, or
// the spec changed again since).
func DirectHeld(sb *agentsv1alpha1.Sandbox) string {
	gen, why, ok := strings.Cut(sb.Annotations[AnnotationDirectHeld], " ")
	if !ok || gen != strconv.FormatInt(sb.Generation, 10) {
		return ""
	}
	return why
}
