package upgrade

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// PoolOf is the controller reference of the SandboxSet whose warm pool sb
// is in, nil when it is in none. A sandbox is in a pool while that set
// controls it and it is not claimed: a sandbox labelled
// agents.kruise.io/sandbox-claimed=true has left the pool even if the set
// still controls it, as upstream OpenKruise Agents has it (claimed = the
// label "true" or no controller). A claim written in two steps, or by hand,
// may set the label before it removes the owner reference; the pool must
// not replace, scale away or count the claimed sandbox meanwhile, and it
// removes the owner reference itself (the selector's releaseClaimed), so
// that deleting the set does not delete the claimed sandbox.
//
// This is the one test of pool membership: the selector's pool (which
// members it keeps) and its ops selection (a member is left to its set),
// and statusagg (which members a set's status counts) ask it.
func PoolOf(sb *agentsv1alpha1.Sandbox) *metav1.OwnerReference {
	if sb.Labels[agentsv1alpha1.LabelSandboxClaimed] == "true" {
		return nil
	}
	ref := metav1.GetControllerOf(sb)
	if ref == nil || ref.Kind != "SandboxSet" {
		return nil
	}
	return ref
}

// IsPoolMember reports whether sb is a member of set's pool now: in it
// (PoolOf names set, by UID) and not being deleted.
func IsPoolMember(sb *agentsv1alpha1.Sandbox, set *agentsv1alpha1.SandboxSet) bool {
	ref := PoolOf(sb)
	return ref != nil && ref.UID == set.UID && sb.DeletionTimestamp == nil
}

// AnnotationMembersFailing is the SandboxSet annotation the selector writes
// while its pool keeps dead members (phase Failed or Succeeded) of the
// set's current revision instead of replacing them: "<revision> <why>",
// why naming a failed member and what its Ready condition says. Members of
// that revision died again and again (the selector's threshold), so
// replacing them would be a hot loop that also destroys the evidence. The
// selector removes it once no dead member of that revision is left (the
// user deleted them: the pool replaces dead members again) or the template
// changes. statusagg shows it as the set's MembersFailing condition and
// Event.
const AnnotationMembersFailing = "molt.dev/members-failing"

// DeadMembersRetry is how long the pool keeps dead members before it tries
// replacing them again (a few, then it keeps the next ones for as long
// again): a cause that passed (an eviction, a registry that was down) does
// not hold the pool short for good.
const DeadMembersRetry = 10 * time.Minute

// MembersFailingValue encodes AnnotationMembersFailing.
func MembersFailingValue(revision, why string) string { return revision + " " + why }

// MembersFailing returns why the pool keeps set's dead members of revision,
// as the selector recorded it; "" when it does not, or the record is of
// another revision (the template changed since).
func MembersFailing(set *agentsv1alpha1.SandboxSet, revision string) string {
	rev, why, ok := strings.Cut(set.Annotations[AnnotationMembersFailing], " ")
	if !ok || rev != revision {
		return ""
	}
	return why
}
