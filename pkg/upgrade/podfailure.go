package upgrade

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// What a pod that is not Ready tells a person: podcycler judges an
// upgraded pod with these, and the patcher a paused sandbox's woken one.

// failingWaitReasons are the waiting reasons of a container that will not start by itself.
var failingWaitReasons = map[string]bool{
	"ErrImagePull":               true,
	"ImagePullBackOff":           true,
	"InvalidImageName":           true,
	"CrashLoopBackOff":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
}

// ContainerFailure returns "container <name>: <reason> - <message>" for the first init
// container or container that waits for a reason it will not get over by itself, or that
// terminated (an init container only if it failed: a completed one is done).
func ContainerFailure(pod *corev1.Pod) (string, bool) {
	check := func(statuses []corev1.ContainerStatus, init bool) (string, bool) {
		for _, cs := range statuses {
			if w := cs.State.Waiting; w != nil && failingWaitReasons[w.Reason] {
				msg := fmt.Sprintf("container %s: %s - %s", cs.Name, w.Reason, w.Message)
				if last := cs.LastTerminationState.Terminated; last != nil {
					// A crash loop's own words say only that it backs off:
					// how the container last ended is the cause.
					msg += fmt.Sprintf(" (last ended: exit code %d", last.ExitCode)
					if last.Reason != "" {
						msg += ", " + last.Reason
					}
					if last.Message != "" {
						msg += ": " + last.Message
					}
					msg += ")"
				}
				return msg, true
			}
			t := cs.State.Terminated
			if t == nil || (init && t.ExitCode == 0) {
				continue
			}
			reason, msg := t.Reason, t.Message
			if reason == "" {
				reason = "Terminated"
			}
			if msg == "" {
				msg = fmt.Sprintf("exit code %d", t.ExitCode)
			}
			return fmt.Sprintf("container %s: %s - %s", cs.Name, reason, msg), true
		}
		return "", false
	}
	if msg, ok := check(pod.Status.InitContainerStatuses, true); ok {
		return msg, true
	}
	return check(pod.Status.ContainerStatuses, false)
}

// WaitingFor says, for a person, what a pod that is not Ready is waiting for.
func WaitingFor(pod *corev1.Pod) string {
	if pod.Spec.NodeName == "" {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				return fmt.Sprintf("not scheduled: %s - %s", c.Reason, c.Message)
			}
		}
		return "not scheduled"
	}
	var waits []string
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if w := cs.State.Waiting; w != nil {
				waits = append(waits, fmt.Sprintf("container %s waiting (%s)", cs.Name, w.Reason))
			} else if cs.State.Running != nil && !cs.Ready {
				waits = append(waits, fmt.Sprintf("container %s running, not ready", cs.Name))
			}
		}
	}
	if len(waits) > 0 {
		return strings.Join(waits, ", ")
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return fmt.Sprintf("condition Ready=%s (%s)", c.Status, c.Reason)
		}
	}
	return fmt.Sprintf("no Ready condition reported by node %s yet", pod.Spec.NodeName)
}

// HeldContainers names the pod's containers that wait for something other
// than their start, or exited with an error, in words that stay the same
// while the cause does (each change costs a status write, and a broken pod
// cycles for hours): an image that does not pull is one text whether the
// kubelet is pulling or backing off; a container that keeps exiting is
// named with its last exit, whether it runs, has just ended or backs off;
// another wait (CreateContainerConfigError, InvalidImageName...) gives the
// kubelet's reason and message. statusagg shows these in a sandbox's Ready
// message; ContainerFailure is podcycler's verdict on an upgraded pod.
func HeldContainers(pod *corev1.Pod) []string {
	var held []string
	for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		waiting, last := s.State.Waiting, s.LastTerminationState.Terminated
		switch {
		case waiting != nil && (waiting.Reason == "ErrImagePull" || waiting.Reason == "ImagePullBackOff"):
			held = append(held, fmt.Sprintf("container %s waits: its image does not pull (ImagePullBackOff; kubectl describe pod %s says why)", s.Name, pod.Name))
		case s.RestartCount > 0 && last != nil && last.ExitCode != 0:
			held = append(held, fmt.Sprintf("container %s keeps exiting (CrashLoopBackOff): last exit code %d (%s)", s.Name, last.ExitCode, last.Reason))
		case waiting != nil && waiting.Reason != "" && waiting.Reason != "ContainerCreating" && waiting.Reason != "PodInitializing":
			why := waiting.Reason
			if waiting.Message != "" && !strings.Contains(why, "BackOff") {
				why += ": " + waiting.Message
			}
			held = append(held, fmt.Sprintf("container %s waits: %s", s.Name, why))
		case s.State.Terminated != nil && s.State.Terminated.ExitCode != 0:
			held = append(held, fmt.Sprintf("container %s exited with code %d (%s)", s.Name, s.State.Terminated.ExitCode, s.State.Terminated.Reason))
		}
	}
	return held
}

// pullFailure matches ContainerFailure's message for a container whose
// image cannot be pulled.
var pullFailure = regexp.MustCompile(`container (\S+): (ErrImagePull|ImagePullBackOff|InvalidImageName) - `)

// ImageNotPulled returns the container that message (a failure's, from
// ContainerFailure) says cannot pull its image.
func ImageNotPulled(message string) (container string, ok bool) {
	if m := pullFailure.FindStringSubmatch(message); m != nil {
		return m[1], true
	}
	return "", false
}

// PatchImageNotPulled returns the image patch sets on the container that
// message (an UpgradePodFailed's, from ContainerFailure) says cannot be
// pulled, and that container's name: the patch itself is the cause, so the
// same patch fails the same way.
func PatchImageNotPulled(patch []byte, message string) (container, image string, ok bool) {
	m := pullFailure.FindStringSubmatch(message)
	if m == nil {
		return "", "", false
	}
	var doc struct {
		Spec struct {
			Containers     []corev1.Container `json:"containers"`
			InitContainers []corev1.Container `json:"initContainers"`
		} `json:"spec"`
	}
	if json.Unmarshal(patch, &doc) != nil {
		return "", "", false
	}
	for _, c := range slices.Concat(doc.Spec.Containers, doc.Spec.InitContainers) {
		if c.Name == m[1] && c.Image != "" {
			return c.Name, c.Image, true
		}
	}
	return "", "", false
}

// ImageNotPulledHint is what to do when failures name a container whose
// image cannot be pulled, "" when none does: the patch sets it
// (PatchImageNotPulled on each UpgradePodFailed message), so a retry, which
// keeps the patch, would fail the same way; or the patch leaves it (a
// postUpgrade-only ops resuming an earlier ops's bad image), so the template
// keeps it and any ops without an image fix fails the same way.
func ImageNotPulledHint(patch []byte, messages []string) string {
	for _, msg := range messages {
		if container, image, ok := PatchImageNotPulled(patch, msg); ok {
			return fmt.Sprintf("the patch's image %s (container %s) cannot be pulled: if its name or tag is wrong, `kubectl molt retry`, which keeps the patch, would fail the same way, so "+
				"create a new SandboxUpdateOps with the image fixed (it resumes those sandboxes at UpgradePod, their backup kept), or with the old image to roll back; "+
				"if the registry or its credentials (imagePullSecrets) were the cause, fix them, then `kubectl molt retry`", image, container)
		}
	}
	for _, msg := range messages {
		if m := pullFailure.FindStringSubmatch(msg); m != nil {
			// The patch does not set that image: the template has it, from
			// the ops that did (this one resumes its failure without a fix).
			return fmt.Sprintf("container %s's image cannot be pulled, and this ops's patch does not change it: the sandbox's template still has the image an earlier patch set, so `kubectl molt retry`, or another ops without an image fix, fails the same way: "+
				"create a new SandboxUpdateOps whose patch sets a working image on container %s (or the old one to roll back), with the postUpgrade that restores the backup; "+
				"if the registry or its credentials (imagePullSecrets) were the cause, fix them, then `kubectl molt retry`", m[1], m[1])
		}
	}
	return ""
}
