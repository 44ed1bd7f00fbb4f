package upgrade

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

const (
	// ConditionAttempt is the Sandbox condition that says which attempt the
	// Upgrading condition describes: status True, reason the current
	// Upgrading reason, message the attempt id (the ops UID, or for a direct
	// upgrade "direct-<generation>"). Written by statusagg together with
	// Upgrading; read by selector and statusagg.
	ConditionAttempt = "UpgradeAttempt"

	// AnnotationPodAttempt is set by podcycler on every pod it creates for an
	// upgrade: the attempt that created it. Read by podcycler and statusagg.
	AnnotationPodAttempt = "molt.dev/attempt"
)

// State is where a sandbox stands for one ops.
type State int

const (
	// NotStarted: the ops has not admitted the sandbox.
	NotStarted State = iota
	// Updating: admitted and not yet at a terminal reason for this attempt.
	Updating
	// Updated: this attempt reached Succeeded.
	Updated
	// Failed: this attempt ended in a *Failed reason.
	Failed
)

func (s State) String() string {
	return [...]string{"NotStarted", "Updating", "Updated", "Failed"}[s]
}

// StateFor says where sb stands for the ops named opsName with uid opsUID.
func StateFor(sb *agentsv1alpha1.Sandbox, opsName string, opsUID types.UID) State {
	if sb.Labels[agentsv1alpha1.LabelUpdateOps] != opsName {
		return NotStarted
	}
	reason, ok := ReasonFor(sb, string(opsUID))
	if !ok {
		return Updating
	}
	switch {
	case reason == agentsv1alpha1.UpgradingReasonSucceeded:
		return Updated
	case agentsv1alpha1.IsUpgradingFailedReason(reason):
		return Failed
	default:
		return Updating
	}
}

// ReasonFor returns the Upgrading reason of sb if its status describes the
// given attempt.
func ReasonFor(sb *agentsv1alpha1.Sandbox, attempt string) (string, bool) {
	a := meta.FindStatusCondition(sb.Status.Conditions, ConditionAttempt)
	if a == nil || a.Message != attempt {
		return "", false
	}
	up := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
	if up == nil {
		return "", false
	}
	return up.Reason, true
}

// CurrentAttempt returns the attempt id the status describes, if any.
func CurrentAttempt(sb *agentsv1alpha1.Sandbox) string {
	if a := meta.FindStatusCondition(sb.Status.Conditions, ConditionAttempt); a != nil {
		return a.Message
	}
	return ""
}
