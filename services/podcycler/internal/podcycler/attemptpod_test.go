package podcycler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// What replacePod does with the sandbox's live pod, already Ready on the target revision:
// adopt it as this attempt's pod (isAttemptPod), keep it as the original that already runs
// the target (runsTarget), or replace it.
func podDecision(pod *corev1.Pod, sb *agentsv1alpha1.Sandbox, d events.Data) string {
	switch {
	case isAttemptPod(pod, sb, "rev", d):
		return "adopt"
	case runsTarget(pod, sb, "rev", d):
		return "keep"
	}
	return "replace"
}

// The original pod of a rollback (the template set back to the revision it runs) is kept,
// never adopted as this attempt's new pod, whether its prehook-done names it or a
// watchdog re-drive names no pod at all: adopted, it would be taken for a new, empty pod,
// and a resume after a failed postUpgrade would restore an older backup over its files.
func TestOriginalPodOfARollbackIsKeptOnARedrive(t *testing.T) {
	sb := restoreSandbox()
	ready := func(attempt, kept string) *corev1.Pod {
		pod := buildPod(sb, "rev", attempt, "ops")
		pod.UID = types.UID("pod-" + attempt)
		if kept != "" {
			pod.Annotations[upgrade.AnnotationPodKept] = kept
		}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		return pod
	}
	original := ready("", "")
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		d    events.Data
		want string
	}{
		{"prehook-done naming the original pod", original, events.Data{Attempt: attemptB, OldPodUID: original.UID}, "keep"},
		{"re-drive naming the original pod", original, events.Data{Attempt: attemptB, OldPodUID: original.UID, Redrive: 1}, "keep"},
		{"re-drive naming no pod", original, events.Data{Attempt: attemptB, Redrive: 1}, "keep"},
		{"re-drive naming no pod, the original built by an earlier attempt", ready("uid-0", ""), events.Data{Attempt: attemptB, Redrive: 2}, "keep"},
		{"re-drive naming no pod, the pod this attempt built", ready(attemptB, ""), events.Data{Attempt: attemptB, Redrive: 1}, "adopt"},
		{"re-drive naming no pod, the pod this attempt kept", ready(attemptB, attemptB), events.Data{Attempt: attemptB, Redrive: 1}, "adopt"},
		// Not a re-drive: the sandbox had no pod when it was patched, so a pod now is one
		// built since, a new one.
		{"prehook-done naming no pod: a pod made since", original, events.Data{Attempt: attemptB}, "adopt"},
		{"prehook-done naming another pod: a pod made since", original, events.Data{Attempt: attemptB, OldPodUID: "gone"}, "adopt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := podDecision(tc.pod, sb, tc.d); got != tc.want {
				t.Errorf("decision = %s, want %s", got, tc.want)
			}
		})
	}
}
