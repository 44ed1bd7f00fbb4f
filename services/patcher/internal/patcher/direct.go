package patcher

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// directWithoutPod returns a direct attempt's PreUpgrade failure when the
// sandbox has no pod to back up and its spec.lifecycle has a preUpgrade: the
// pod was deleted (or evicted) after the template changed, before the backup.
// Going on would build the new pod and let postUpgrade restore an older
// backup over what the volumes hold, as an ops's attempt refuses too
// (noPodToBackUp). "" for a resume, whose stages decide on the pod there is
// (upgrade.ResumeAt), and for an attempt without a preUpgrade.
//
// Only on the request's first delivery: a direct attempt leaves no mark of
// its patch (the user wrote the template), so a redelivery or a re-drive
// cannot tell a pod gone before the patcher from one podcycler deleted after
// an earlier delivery passed the sandbox on (its failure could overtake that
// attempt's prehook-done to statusagg, and end it behind its new pod). Those
// go on as before this check.
func directWithoutPod(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod, d events.Data, firstDelivery bool) string {
	if _, direct := upgrade.DirectAttemptGeneration(d.Attempt); !direct || d.Ops.Name != "" || d.ResumedReason != "" || pod != nil ||
		!firstDelivery || d.Redrive > 0 || sb.Spec.Lifecycle == nil || sb.Spec.Lifecycle.PreUpgrade == nil {
		return ""
	}
	return fmt.Sprintf("sandbox %s/%s has no pod (it was deleted or stopped after its template changed), so preUpgrade cannot back it up; this direct upgrade was not carried on (going on would let postUpgrade restore an older backup over what its volumes hold). The sandbox gets a pod from its new template once it runs (not while it is paused), with nothing of the old pod's workspace outside persistent volumes: restore that workspace from the backup first if it must be, then change spec.template again to clear this failure (that upgrade backs the pod up as usual)",
		sb.Namespace, sb.Name)
}

// rebuiltSinceRequest returns a direct attempt's PreUpgrade failure when the
// sandbox's pod already runs the template the attempt is for and this attempt
// did not build it: the selector requested the attempt because the pod ran
// another revision, so the pod it was for went away since, and podcycler gave
// the sandbox a new one from spec.template. preUpgrade would back that new
// pod's empty workspace up, over the last good backup (DESIGN.md rule 5).
//
// "" otherwise: an ops's attempt (podcycler builds no pod for a sandbox an
// ops has admitted, so its original pod is kept or missing), a resume (the pod
// a failed attempt built runs the target too; upgrade.ResumeAt), a template
// edited since the request (the generation moved: the attempt is for an older
// template, and the pod may well run the newer one it was set back to).
func rebuiltSinceRequest(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod, d events.Data, revision string) string {
	gen, direct := upgrade.DirectAttemptGeneration(d.Attempt)
	if !direct || d.Ops.Name != "" || d.ResumedReason != "" || pod == nil || gen != sb.Generation ||
		pod.Labels[agentsv1alpha1.LabelPodTemplateHash] != revision || upgrade.BuiltBy(pod, d.Attempt) {
		return ""
	}
	return fmt.Sprintf("pod %s/%s (uid %s, created %s) was built from the new template after this direct upgrade was requested: the pod the upgrade was for is gone, and what it held outside persistent volumes with it; preUpgrade was not run, as it would back the new pod's empty workspace up over the last backup, and the sandbox runs the new template: restore that workspace from the backup first if it must be, then change spec.template again to clear this failure (that upgrade backs the pod up as usual)",
		pod.Namespace, pod.Name, pod.UID, pod.CreationTimestamp.UTC().Format("15:04:05"))
}
