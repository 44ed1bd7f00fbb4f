package statusagg

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// progressMember is a member on revision in phase, created at created, whose
// Ready condition (when ready is not "") has that status since readySince.
func progressMember(name, revision string, phase agentsv1alpha1.SandboxPhase, created time.Time, ready metav1.ConditionStatus, readySince time.Time, msg string) *agentsv1alpha1.Sandbox {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(created),
		Labels: map[string]string{agentsv1alpha1.LabelTemplateHash: revision}}}
	sb.Status.Phase = phase
	if ready != "" {
		sb.Status.Conditions = []metav1.Condition{{Type: agentsv1alpha1.ConditionReady, Status: ready, Reason: "PodNotReady",
			Message: msg, LastTransitionTime: metav1.NewTime(readySince)}}
	}
	return sb
}

func TestLateMembers(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const deadline = 5 * time.Minute
	pending, running, failed := agentsv1alpha1.SandboxPending, agentsv1alpha1.SandboxRunning, agentsv1alpha1.SandboxFailed
	tests := []struct {
		name     string
		members  []*agentsv1alpha1.Sandbox
		wantLate []string
		wantNext time.Duration
	}{
		{
			name:    "all available: none late, nothing to wait for",
			members: []*agentsv1alpha1.Sandbox{progressMember("a", "r2", running, ago(time.Hour), metav1.ConditionTrue, ago(time.Hour), "")},
		},
		{
			name:     "pending past the deadline since Ready turned False",
			members:  []*agentsv1alpha1.Sandbox{progressMember("a", "r2", pending, ago(time.Hour), metav1.ConditionFalse, ago(6*time.Minute), "pod a is Pending")},
			wantLate: []string{"a"},
		},
		{
			name:     "Ready False only recently (it was running): not late yet, looked at again when it will be",
			members:  []*agentsv1alpha1.Sandbox{progressMember("a", "r2", pending, ago(time.Hour), metav1.ConditionFalse, ago(time.Minute), "")},
			wantNext: 4 * time.Minute,
		},
		{
			name:     "no Ready condition yet: measured from its creation",
			members:  []*agentsv1alpha1.Sandbox{progressMember("a", "r2", pending, ago(10*time.Minute), "", time.Time{}, "")},
			wantLate: []string{"a"},
		},
		{
			name:    "an outdated member not available is not the current revision's fault",
			members: []*agentsv1alpha1.Sandbox{progressMember("old", "r1", pending, ago(time.Hour), metav1.ConditionFalse, ago(time.Hour), "")},
		},
		{
			name: "a failed member is late too; the longest unavailable first; the next deadline of the others",
			members: []*agentsv1alpha1.Sandbox{
				progressMember("b", "r2", pending, ago(time.Hour), metav1.ConditionFalse, ago(7*time.Minute), ""),
				progressMember("a", "r2", failed, ago(time.Hour), metav1.ConditionFalse, ago(9*time.Minute), ""),
				progressMember("c", "r2", pending, ago(time.Minute), metav1.ConditionFalse, ago(time.Minute), ""),
				progressMember("d", "r2", pending, ago(2*time.Minute), metav1.ConditionFalse, ago(2*time.Minute), ""),
			},
			wantLate: []string{"a", "b"},
			wantNext: 3 * time.Minute,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			late, next := lateMembers(tt.members, "r2", deadline, now)
			var got []string
			for _, sb := range late {
				got = append(got, sb.Name)
			}
			if !slices.Equal(got, tt.wantLate) || next != tt.wantNext {
				t.Errorf("late %v, next %s; want %v, %s", got, next, tt.wantLate, tt.wantNext)
			}
		})
	}
	if late, next := lateMembers([]*agentsv1alpha1.Sandbox{progressMember("a", "", pending, ago(time.Hour), "", time.Time{}, "")}, "", deadline, now); late != nil || next != 0 {
		t.Errorf("a set without a revision: late %v, next %s; want none", late, next)
	}
}

// Progressing turns False naming the late members, quoting what holds two
// of them and what to do; its message does not change as time passes; it
// turns True once none is late; a set that never stalled shows no
// Progressing at all.
func TestSetProgress(t *testing.T) {
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "ns", Generation: 2}}
	st := agentsv1alpha1.SandboxSetStatus{UpdateRevision: "r2"}
	setProgress(&st, set, nil, 5*time.Minute)
	if c := meta.FindStatusCondition(st.Conditions, ConditionSetProgressing); c != nil {
		t.Fatalf("a set that never stalled: Progressing %+v, want none", c)
	}
	old := time.Now().Add(-time.Hour)
	late := []*agentsv1alpha1.Sandbox{
		progressMember("warm-a", "r2", agentsv1alpha1.SandboxPending, old, metav1.ConditionFalse, old, "pod warm-a is Pending; container main waits: ImagePullBackOff"),
		progressMember("warm-b", "r2", agentsv1alpha1.SandboxPending, old, metav1.ConditionFalse, old, "pod warm-b is Pending; container main waits: ImagePullBackOff"),
		progressMember("warm-c", "r2", agentsv1alpha1.SandboxPending, old, metav1.ConditionFalse, old, "pod warm-c is Pending; container main waits: ImagePullBackOff"),
	}
	setProgress(&st, set, late, 5*time.Minute)
	c := meta.FindStatusCondition(st.Conditions, ConditionSetProgressing)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != SetProgressReasonMembersNotAvailable {
		t.Fatalf("Progressing = %+v, want False, reason %s", c, SetProgressReasonMembersNotAvailable)
	}
	for _, want := range []string{"3 members on the current revision (r2) not available for longer than 5m0s",
		"warm-a: pod warm-a is Pending; container main waits: ImagePullBackOff", "warm-b: pod warm-b", "(and 1 more)",
		"kubectl edit sbs warm -n ns", "kubectl describe pod warm-a -n ns"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}
	if strings.Contains(c.Message, "warm-c:") {
		t.Errorf("message %q quotes more than two members", c.Message)
	}
	before := *c
	setProgress(&st, set, late, 5*time.Minute)
	if c := meta.FindStatusCondition(st.Conditions, ConditionSetProgressing); *c != before {
		t.Errorf("Progressing changed with nothing else changing: %+v, was %+v", c, before)
	}
	setProgress(&st, set, nil, 5*time.Minute)
	if c := meta.FindStatusCondition(st.Conditions, ConditionSetProgressing); c == nil || c.Status != metav1.ConditionTrue || c.Reason != SetProgressReasonMembersAvailable {
		t.Errorf("no member late: Progressing %+v, want True, reason %s", c, SetProgressReasonMembersAvailable)
	}
}

// A long Ready message is cut, what to do is not.
func TestMembersNotAvailableMessageKeepsItsAdvice(t *testing.T) {
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "ns"}}
	old := time.Now().Add(-time.Hour)
	sb := progressMember("warm-a", "r2", agentsv1alpha1.SandboxPending, old, metav1.ConditionFalse, old, strings.Repeat("x", 2000))
	msg := membersNotAvailableMessage(set, "r2", []*agentsv1alpha1.Sandbox{sb}, time.Minute)
	if len(msg) > agentsv1alpha1.MaxConditionMessageLength || !strings.Contains(msg, "kubectl describe pod warm-a -n ns") {
		t.Errorf("message of %d characters %q, want at most %d with what to do", len(msg), msg, agentsv1alpha1.MaxConditionMessageLength)
	}
}
