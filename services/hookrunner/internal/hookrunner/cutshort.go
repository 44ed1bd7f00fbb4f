package hookrunner

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// A hook whose pod went away while it ran: how that is found, and what a
// preUpgrade cut short so says.

// podGoneError is a hook's call cut short because its pod went away (podGone).
type podGoneError struct{ error }

func (e podGoneError) Unwrap() error { return e.error }

// withCutShortNote is message, the failure of st's hook on pod (err, the call's
// error, if any), with backupCutShort (preUpgrade) or restoreCutShort
// (postUpgrade) added when the pod went away while it ran: said by the call (podGoneError), or found now (the
// runtime may report the hook killed, or stop answering, as its pod stops).
func (h *HookRunner) withCutShortNote(ctx context.Context, st step, pod *corev1.Pod, d events.Data, paused bool, err error, message string) string {
	note := backupCutShort(d, paused)
	if st != preStep {
		note = restoreCutShort(d)
	}
	if errors.As(err, new(podGoneError)) {
		return upgrade.WithNote(message, note)
	}
	if gone := h.podGone(ctx, pod); gone != "" {
		return upgrade.WithNote(message, gone+": "+note)
	}
	return message
}

// restoreCutShort is what a postUpgrade cut short by its new pod's deletion
// adds to its failure, for attempt d: the restore went with the pod, the
// backup may not be whole any more, and the way on.
func restoreCutShort(d events.Data) string {
	next := "change spec.template again (before or after the sandbox has its pod back): the upgrade that resumes this one restores the backup into a new pod of this upgrade, which is never backed up"
	if d.Ops.Name != "" {
		next = fmt.Sprintf("once SandboxUpdateOps %s has ended, `kubectl molt retry %s -n %s` (or a new SandboxUpdateOps that selects the sandbox) resumes it from PostUpgrade", d.Ops.Name, d.Ops.Name, d.Sandbox.Namespace)
	}
	return "what the restore wrote went with the pod; the sandbox gets a new pod of this upgrade, which is never backed up over the backup. Check that the backup is still whole (a restore that removes its archive once done may have removed it before the pod went), then restore it again: " + next
}

// backupCutShort is what a preUpgrade cut short by its pod's deletion adds to
// its failure, for attempt d: what is left and the way on, which then needs no
// other next step. A paused sandbox (woken for the upgrade) gets no pod now:
// the failed attempt ends, and the pause stops it again.
func backupCutShort(d events.Data, paused bool) string {
	from := "its template"
	next := "then change spec.template again to go on"
	if d.Ops.Name != "" {
		from = "the template it ran before the patch"
		next = fmt.Sprintf("then, once SandboxUpdateOps %s has ended, `kubectl molt retry %s -n %s` (or a new SandboxUpdateOps that selects the sandbox) resumes it", d.Ops.Name, d.Ops.Name, d.Sandbox.Namespace)
	}
	gets := "The sandbox gets a new pod from " + from + ", holding only what its persistent volumes keep; "
	if paused {
		gets = "The sandbox is paused, so it is left with no pod (unless it was unpaused meanwhile); the pod it gets next (woken by the next upgrade, or unpaused) is built from " + from + " and holds only what its persistent volumes keep; "
	}
	return "molt has no word of a backup by this run: cut short, it may have written none, a partial one or a whole one where the last backup is (its output says how far it got): check that backup is intact before relying on it. " + gets +
		"the next upgrade runs preUpgrade on that pod, backing it up where the last backup is: copy a backup that must be kept away first, " + next
}

// podGone says how pod went away ("" while it is still there and not being
// deleted, or when the API server does not answer).
func (h *HookRunner) podGone(ctx context.Context, pod *corev1.Pod) string {
	now, err := h.kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || (err == nil && now.UID != pod.UID):
		return fmt.Sprintf("pod %s/%s (uid %s) was deleted while the hook ran", pod.Namespace, pod.Name, pod.UID)
	case err == nil && now.DeletionTimestamp != nil:
		return fmt.Sprintf("pod %s/%s (uid %s) is being deleted while the hook runs", pod.Namespace, pod.Name, pod.UID)
	}
	return ""
}
