package podcycler

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// outcome is where a pod created by an upgrade stands.
type outcome int

const (
	podWaiting outcome = iota // not Ready yet, nothing wrong yet, deadline not passed
	podReady                  // Ready=True
	podFailed                 // will not become Ready: a container failed, or the deadline passed
)

// verdict is what judge says about a pod.
type verdict struct {
	outcome outcome
	// message explains podFailed (the UpgradePodFailed message).
	message string
	// recheck is how long until the deadline, for podWaiting.
	recheck time.Duration
}

// judge decides, in this order, whether pod is Ready, has a container that failed
// (init containers first), is past its deadline (timeout after creation), or is still on
// its way.
func judge(pod *corev1.Pod, now time.Time, timeout time.Duration) verdict {
	// A pod restored from a checkpoint is Ready once the checkpointer says
	// the restore is done, not before.
	restored := upgrade.Restored(pod)
	if podReadyCondition(pod) && restored {
		return verdict{outcome: podReady}
	}
	if msg, failed := upgrade.ContainerFailure(pod); failed {
		return verdict{outcome: podFailed, message: agentsv1alpha1.TruncateConditionMessage(msg)}
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return verdict{outcome: podFailed, message: agentsv1alpha1.TruncateConditionMessage(
			fmt.Sprintf("pod %s ended in phase %s: %s", pod.Name, pod.Status.Phase, joinNonEmpty(pod.Status.Reason, pod.Status.Message)))}
	}
	age := now.Sub(deadlineStart(pod))
	if age >= timeout {
		return verdict{outcome: podFailed, message: agentsv1alpha1.TruncateConditionMessage(
			fmt.Sprintf("pod %s not Ready after %s: %s", pod.Name, timeout, notReadyWhy(pod, restored)))}
	}
	return verdict{outcome: podWaiting, recheck: timeout - age}
}

// deadlineStart is when pod's readiness deadline starts: its creation, or, for a pod
// the attempt took as its own (kept or adopted: upgrade.AnnotationPodTakenAt), the
// later time it took it. An unreadable annotation counts from the creation.
func deadlineStart(pod *corev1.Pod) time.Time {
	start := pod.CreationTimestamp.Time
	if at, err := time.Parse(time.RFC3339, pod.Annotations[upgrade.AnnotationPodTakenAt]); err == nil && at.After(start) {
		return at
	}
	return start
}

func podReadyCondition(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// joinNonEmpty joins the non-empty ones of parts with " - ", so a message never ends in
// a dangling separator; "no reason given" when all are empty.
func joinNonEmpty(parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		return "no reason given"
	}
	return strings.Join(kept, " - ")
}

// notReadyWhy says what a pod past its deadline still waits for.
func notReadyWhy(pod *corev1.Pod, restored bool) string {
	if podReadyCondition(pod) && !restored {
		return fmt.Sprintf("checkpoint %s was never restored into it (no checkpointer set %s): check the checkpointer", pod.Annotations[upgrade.AnnotationRestoreFrom], upgrade.AnnotationRestored)
	}
	return upgrade.WaitingFor(pod)
}
