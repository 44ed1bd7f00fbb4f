package upgrade

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// stage is one row of the stage table: an in-progress Upgrading reason, the
// reason that files a failure in it, and where a new attempt resumes after
// that failure when the pod gives no better proof (see ResumeAt).
type stage struct {
	reason string
	failed string
	resume string
}

// stages is the one table of the upgrade's stages, in the order an attempt
// passes them. Succeeded ends it. Every other copy of the order asks this
// table (Rank, Past, InProgress, Terminal, FailedReason, ResumeAt).
//
// A failure is filed under the stage it happened in. The patch is written
// while the attempt is in PreUpgrade (the Upgrading condition says
// PreUpgrade from `requested` on), so a patch that fails for one sandbox is
// a PreUpgradeFailed, and it resumes at PreUpgrade: a backup is never
// skipped because something before it failed.
var stages = []stage{
	{agentsv1alpha1.UpgradingReasonResuming, agentsv1alpha1.UpgradingReasonPreUpgradeFailed, agentsv1alpha1.UpgradingReasonPreUpgrade},
	{agentsv1alpha1.UpgradingReasonResumeSucceed, agentsv1alpha1.UpgradingReasonPreUpgradeFailed, agentsv1alpha1.UpgradingReasonPreUpgrade},
	{agentsv1alpha1.UpgradingReasonPreUpgrade, agentsv1alpha1.UpgradingReasonPreUpgradeFailed, agentsv1alpha1.UpgradingReasonPreUpgrade},
	{agentsv1alpha1.UpgradingReasonCheckpointing, agentsv1alpha1.UpgradingReasonCheckpointFailed, agentsv1alpha1.UpgradingReasonCheckpointing},
	{agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonUpgradePodFailed, agentsv1alpha1.UpgradingReasonUpgradePod},
	{agentsv1alpha1.UpgradingReasonPostUpgrade, agentsv1alpha1.UpgradingReasonPostUpgradeFailed, agentsv1alpha1.UpgradingReasonPostUpgrade},
}

// Rank orders Upgrading reasons along the table: 1 for the first stage, one
// more per stage, len(stages)+1 for Succeeded. A failed reason ranks as the
// stage it was filed under. Unknown reasons rank 0.
func Rank(reason string) int {
	if reason == agentsv1alpha1.UpgradingReasonSucceeded {
		return len(stages) + 1
	}
	if f := StageOfFailure(reason); f != "" {
		reason = f
	}
	for i, s := range stages {
		if s.reason == reason {
			return i + 1
		}
	}
	return 0
}

// InProgress reports whether reason is a stage an attempt is still in.
func InProgress(reason string) bool {
	for _, s := range stages {
		if s.reason == reason {
			return true
		}
	}
	return false
}

// Terminal reports whether reason ends an attempt: Succeeded or a failure.
func Terminal(reason string) bool {
	return reason == agentsv1alpha1.UpgradingReasonSucceeded || agentsv1alpha1.IsUpgradingFailedReason(reason)
}

// Past reports whether an attempt whose status shows reason has nothing
// left to do in stage: it ended (Succeeded or failed, in any stage), or it
// is already in a later stage. Handlers skip a redelivered input when this
// is true.
func Past(reason, stage string) bool {
	if Terminal(reason) {
		return true
	}
	r := Rank(reason)
	return r > 0 && r > Rank(stage)
}

// RedriveRefusal says why a re-driven input of stage (events.Event.Redriven)
// must not be acted on for attempt of sb, read from the API server; "" when it
// may. The watchdog re-drives only a stage the sandbox's status shows, and
// statusagg records no re-drive in status, so a re-drive for an attempt that
// the status does not show at stage or later is not the watchdog's: it was
// published with statusagg's NATS password by someone else (DESIGN rule 14).
// Acted on, a prehook-done for an attempt still in PreUpgrade would replace
// the pod before its backup.
//
// A refusal is logged with RedriveRefused and the message is acknowledged.
func RedriveRefusal(sb *agentsv1alpha1.Sandbox, attempt, stage string) string {
	reason, ok := ReasonFor(sb, attempt)
	switch {
	case !ok:
		return fmt.Sprintf("the status of sandbox %s/%s does not show attempt %s", sb.Namespace, sb.Name, attempt)
	case !Terminal(reason) && Rank(reason) < Rank(stage):
		return fmt.Sprintf("the status of sandbox %s/%s shows attempt %s in %s, not yet in %s", sb.Namespace, sb.Name, attempt, reason, stage)
	}
	return ""
}

// RedriveRefused is the log message of a refused re-drive.
const RedriveRefused = "Refused a re-drive that the watchdog did not publish; nothing was done. Someone else publishes with statusagg's NATS user: change its password (deploy/nats/auth.conf)"

// FailedReason is the reason that files a failure in stage ("" for an
// unknown stage).
func FailedReason(stage string) string {
	for _, s := range stages {
		if s.reason == stage {
			return s.failed
		}
	}
	return ""
}

// StageOfFailure is the stage a failed reason was filed under (the latest
// stage sharing it), "" when reason is not a failure.
func StageOfFailure(reason string) string {
	for i := len(stages) - 1; i >= 0; i-- {
		if stages[i].failed == reason {
			return stages[i].reason
		}
	}
	return ""
}

// ResumeStage is where the table resumes a failed reason, before the pod is
// looked at ("" when reason is not a failure).
func ResumeStage(reason string) string {
	for i := len(stages) - 1; i >= 0; i-- {
		if stages[i].failed == reason {
			return stages[i].resume
		}
	}
	return ""
}

// ResumeAt is the stage a new attempt continues from, for a sandbox whose
// last attempt ended in failedReason and whose pod is now pod (nil when it
// has none); failed are that attempt and the failed ones it continued
// (ResumedChain), since the last success. It starts at the first stage
// whose work is not durably done:
//
//   - the pod is not one built during the failed attempts (the original pod
//     is still there, its workspace may have moved on): PreUpgrade, so the
//     backup is taken again from it;
//   - there is no pod, or it was built during a failed attempt (its
//     workspace is new and empty, a backup of it would overwrite the good
//     one): never PreUpgrade; the table's stage, at least UpgradePod;
//   - PostUpgrade only when that pod already runs targetRevision, is Ready
//     and holds the checkpoint it was built to restore (Restored), else
//     UpgradePod (the pod is rebuilt, the backup restored). A pod rebuilt
//     after a CheckpointRestore attempt failed may be Ready before the
//     checkpointer restored it: the attempt would succeed on an empty
//     workspace and delete the checkpoint.
func ResumeAt(failedReason string, failed []string, pod *corev1.Pod, targetRevision string) string {
	at := ResumeStage(failedReason)
	if at == "" {
		return ""
	}
	if originalPod(pod, failed) {
		return agentsv1alpha1.UpgradingReasonPreUpgrade
	}
	if Rank(at) < Rank(agentsv1alpha1.UpgradingReasonUpgradePod) {
		at = agentsv1alpha1.UpgradingReasonUpgradePod
	}
	if at == agentsv1alpha1.UpgradingReasonPostUpgrade &&
		(pod == nil || pod.DeletionTimestamp != nil || pod.Labels[agentsv1alpha1.LabelPodTemplateHash] != targetRevision || !PodReady(pod) || !Restored(pod)) {
		at = agentsv1alpha1.UpgradingReasonUpgradePod
	}
	return at
}

// originalPod reports whether pod is there and none of the failed attempts
// built it (NewPodOf): the pod they started from, still holding the live
// workspace.
func originalPod(pod *corev1.Pod, failed []string) bool {
	return pod != nil && !slices.ContainsFunc(failed, func(a string) bool { return NewPodOf(pod, a) })
}

// BuiltBy reports whether pod was created by molt during attempt (it
// carries the attempt in AnnotationPodAttempt).
func BuiltBy(pod *corev1.Pod, attempt string) bool {
	return pod != nil && attempt != "" && pod.Annotations[AnnotationPodAttempt] == attempt
}

// PodReady reports whether pod's Ready condition is True.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ControlledBy reports whether pod's controller is the Sandbox with uid:
// molt acts only on a pod that is provably its sandbox's.
func ControlledBy(pod *corev1.Pod, uid types.UID) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.Kind == "Sandbox" && ref.UID == uid
}

// Stages returns the in-progress Upgrading reasons in the order an attempt
// passes them (kubectl molt counts sandboxes per stage in this order).
func Stages() []string {
	out := make([]string, len(stages))
	for i, s := range stages {
		out[i] = s.reason
	}
	return out
}
