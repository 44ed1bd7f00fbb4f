package podcycler

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/pkg/upgrade"
)

func TestJudge(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	waiting := func(name, reason, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
	}
	terminated := func(name, reason string, code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}}}
	}
	running := corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	readyCond := func(s corev1.ConditionStatus) []corev1.PodCondition {
		return []corev1.PodCondition{{Type: corev1.PodReady, Status: s, Reason: "ContainersNotReady"}}
	}

	tests := []struct {
		name    string
		status  corev1.PodStatus
		node    string
		age     time.Duration
		want    outcome
		message string // prefix of the failure message
		recheck time.Duration
	}{
		{name: "ready", node: "n1", status: corev1.PodStatus{Conditions: readyCond(corev1.ConditionTrue), ContainerStatuses: []corev1.ContainerStatus{running}}, want: podReady},
		{name: "creating", node: "n1", age: time.Minute, status: corev1.PodStatus{Conditions: readyCond(corev1.ConditionFalse),
			ContainerStatuses: []corev1.ContainerStatus{waiting("main", "ContainerCreating", "")}}, want: podWaiting, recheck: 4 * time.Minute},
		{name: "image pull error", node: "n1", status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("main", "ErrImagePull", "not found")}},
			want: podFailed, message: "container main: ErrImagePull - not found"},
		{name: "image pull back-off", node: "n1", status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running, waiting("side", "ImagePullBackOff", "Back-off pulling image")}},
			want: podFailed, message: "container side: ImagePullBackOff - Back-off pulling image"},
		{name: "invalid image name", node: "n1", status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("main", "InvalidImageName", "bad")}},
			want: podFailed, message: "container main: InvalidImageName - bad"},
		{name: "crash loop", node: "n1", status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{waiting("main", "CrashLoopBackOff", "back-off 10s")}},
			want: podFailed, message: "container main: CrashLoopBackOff - back-off 10s"},
		{name: "container terminated", node: "n1", status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{terminated("main", "Error", 2)}},
			want: podFailed, message: "container main: Error - exit code 2"},
		{name: "init container failed first", node: "n1", status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{terminated("init", "Error", 1)},
			ContainerStatuses:     []corev1.ContainerStatus{waiting("main", "CrashLoopBackOff", "x")}},
			want: podFailed, message: "container init: Error - exit code 1"},
		{name: "completed init container is fine", node: "n1", age: time.Second, status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{terminated("init", "Completed", 0)},
			ContainerStatuses:     []corev1.ContainerStatus{waiting("main", "ContainerCreating", "")}},
			want: podWaiting, recheck: 5*time.Minute - time.Second},
		{name: "deadline passed while creating", node: "n1", age: 5 * time.Minute, status: corev1.PodStatus{Conditions: readyCond(corev1.ConditionFalse),
			ContainerStatuses: []corev1.ContainerStatus{waiting("main", "ContainerCreating", "")}},
			want: podFailed, message: "pod sbx not Ready after 5m0s: container main waiting (ContainerCreating)"},
		{name: "deadline passed unscheduled", age: 6 * time.Minute, status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes are available"}}},
			want: podFailed, message: "pod sbx not Ready after 5m0s: not scheduled: Unschedulable - 0/3 nodes are available"},
		{name: "pod failed", node: "n1", status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"},
			want: podFailed, message: "pod sbx ended in phase Failed: Evicted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "sbx", CreationTimestamp: metav1.NewTime(created)},
				Spec:       corev1.PodSpec{NodeName: tt.node},
				Status:     tt.status,
			}
			got := judge(pod, created.Add(tt.age), 5*time.Minute)
			if got.outcome != tt.want {
				t.Fatalf("outcome = %v (%q), want %v", got.outcome, got.message, tt.want)
			}
			if !strings.HasPrefix(got.message, tt.message) || (tt.message == "") != (got.message == "") {
				t.Errorf("message = %q, want prefix %q", got.message, tt.message)
			}
			if got.recheck != tt.recheck {
				t.Errorf("recheck = %s, want %s", got.recheck, tt.recheck)
			}
		})
	}
}

// A pod the attempt kept (or adopted) was created long before: its deadline counts from
// when the attempt took it, so a moment not Ready right after is waited out.
func TestJudgeCountsATakenPodsDeadlineFromTheTake(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	taken := created.Add(24 * time.Hour)
	notReady := corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
	pod := func(takenAt string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sbx", CreationTimestamp: metav1.NewTime(created)},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: notReady}
		if takenAt != "" {
			p.Annotations = map[string]string{upgrade.AnnotationPodTakenAt: takenAt}
		}
		return p
	}
	if got := judge(pod(taken.Format(time.RFC3339)), taken.Add(time.Second), 5*time.Minute); got.outcome != podWaiting || got.recheck != 5*time.Minute-time.Second {
		t.Errorf("kept pod a second after the take: %v %q (recheck %s), want waiting for 4m59s", got.outcome, got.message, got.recheck)
	}
	if got := judge(pod(taken.Format(time.RFC3339)), taken.Add(5*time.Minute), 5*time.Minute); got.outcome != podFailed {
		t.Errorf("kept pod 5m after the take: %v, want failed", got.outcome)
	}
	for _, bad := range []string{"", "yesterday", created.Add(-time.Hour).Format(time.RFC3339)} {
		if got := judge(pod(bad), taken.Add(time.Second), 5*time.Minute); got.outcome != podFailed {
			t.Errorf("taken-at %q: %v, want failed (the deadline counts from the creation)", bad, got.outcome)
		}
	}
}

func TestJudgeTruncatesLongMessages(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: strings.Repeat("x", 5000)}},
	}}}}
	if got := judge(pod, time.Now(), time.Minute); len(got.message) != 1024 {
		t.Fatalf("message length = %d, want 1024", len(got.message))
	}
}
