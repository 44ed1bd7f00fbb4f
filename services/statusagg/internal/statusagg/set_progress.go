package statusagg

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// ConditionSetProgressing is False on a SandboxSet while members on its
// current revision (status.updateRevision) have not been available (phase
// Running) for longer than the progress deadline (--set-progress-deadline):
// their pods do not work (ImagePullBackOff, CrashLoopBackOff, a container
// that exits), and the rolling update stalls at maxUnavailable. Like a
// Deployment's Progressing condition with ProgressDeadlineExceeded. A
// Warning Event (SetEventMembersNotAvailable) says so when it turns False;
// it turns True again once no member is late. A set that never had a late
// member has no such condition.
const (
	ConditionSetProgressing = agentsv1alpha1.ConditionProgressing
	// SetProgressReasonMembersNotAvailable: Progressing=False; the message
	// counts the late members, quotes the Ready message of one or two, and
	// says what to do.
	SetProgressReasonMembersNotAvailable = "MembersNotAvailable"
	// SetProgressReasonMembersAvailable: Progressing=True once no member on
	// the current revision is late.
	SetProgressReasonMembersAvailable = "MembersAvailable"
	// SetEventMembersNotAvailable is the Warning Event's reason when
	// Progressing turns False.
	SetEventMembersNotAvailable = SetProgressReasonMembersNotAvailable
)

// lateMembers returns the members on revision that have not been available
// for longer than deadline at now, those unavailable longest first (then by
// name), and how long until the next of the others passes the deadline (0
// when none will: every unavailable one is late already, or all are
// available). A member is unavailable since its Ready condition turned
// False, or since it was created when it has no Ready condition yet.
func lateMembers(members []*agentsv1alpha1.Sandbox, revision string, deadline time.Duration, now time.Time) (late []*agentsv1alpha1.Sandbox, next time.Duration) {
	if revision == "" {
		return nil, 0
	}
	since := map[*agentsv1alpha1.Sandbox]time.Time{}
	for _, sb := range members {
		if sb.Labels[agentsv1alpha1.LabelTemplateHash] != revision || sb.Status.Phase == agentsv1alpha1.SandboxRunning {
			continue
		}
		at := sb.CreationTimestamp.Time
		if ready := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionReady); ready != nil && ready.Status != metav1.ConditionTrue {
			at = ready.LastTransitionTime.Time
		}
		if left := at.Add(deadline).Sub(now); left >= 0 {
			if next == 0 || left < next {
				next = max(left, time.Millisecond)
			}
			continue
		}
		since[sb] = at
		late = append(late, sb)
	}
	slices.SortFunc(late, func(a, b *agentsv1alpha1.Sandbox) int {
		if c := since[a].Compare(since[b]); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return late, next
}

// setProgress sets st's Progressing condition from the late members
// (lateMembers): False while there are some, True once there are none
// again (only when the condition exists: a set that never stalled shows
// none). Its message changes only with the late members and their Ready
// messages, never with time alone, so that a stalled set is not written
// again as time passes.
func setProgress(st *agentsv1alpha1.SandboxSetStatus, set *agentsv1alpha1.SandboxSet, late []*agentsv1alpha1.Sandbox, deadline time.Duration) {
	if len(late) > 0 {
		setCondition(&st.Conditions, metav1.Condition{Type: ConditionSetProgressing, Status: metav1.ConditionFalse,
			Reason: SetProgressReasonMembersNotAvailable, Message: membersNotAvailableMessage(set, st.UpdateRevision, late, deadline), ObservedGeneration: set.Generation})
	} else if meta.FindStatusCondition(st.Conditions, ConditionSetProgressing) != nil {
		setCondition(&st.Conditions, metav1.Condition{Type: ConditionSetProgressing, Status: metav1.ConditionTrue,
			Reason: SetProgressReasonMembersAvailable, Message: fmt.Sprintf("no member on the current revision has been unavailable for longer than %s", deadline), ObservedGeneration: set.Generation})
	}
}

// membersNotAvailableMessage is Progressing=False's message: how many
// members on revision are late, what holds the first one or two (their
// Ready messages), and what to do.
func membersNotAvailableMessage(set *agentsv1alpha1.SandboxSet, revision string, late []*agentsv1alpha1.Sandbox, deadline time.Duration) string {
	var quoted []string
	for _, sb := range late[:min(len(late), 2)] {
		why := "phase " + string(sb.Status.Phase)
		if ready := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionReady); ready != nil && ready.Status != metav1.ConditionTrue && ready.Message != "" {
			why = ready.Message
		}
		quoted = append(quoted, fmt.Sprintf("%s: %s", sb.Name, why))
	}
	more := ""
	if len(late) > len(quoted) {
		more = fmt.Sprintf(" (and %d more)", len(late)-len(quoted))
	}
	members := "member"
	if len(late) > 1 {
		members = "members"
	}
	return upgrade.WithNote(
		fmt.Sprintf("%d %s on the current revision (%s) not available for longer than %s: %s%s",
			len(late), members, revision, deadline, strings.Join(quoted, "; "), more),
		fmt.Sprintf("their pods do not work, and the rolling update stops at maxUnavailable: fix spec.template with `kubectl edit sbs %s -n %s`, "+
			"or see why with `kubectl describe pod %s -n %s`", set.Name, set.Namespace, late[0].Name, set.Namespace))
}
