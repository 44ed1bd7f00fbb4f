package statusagg

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// Reasons statusagg writes besides the wire-contract ones of
// agentsv1alpha1 (API.md lists Ready's reasons as "PodReady, Upgrading,
// PodCreateFailed, …"). Produced by statusagg; read by users.
const (
	// ReadyReasonPodNotCreated: the sandbox has no pod yet (Ready=False).
	ReadyReasonPodNotCreated = "PodNotCreated"
	// ReadyReasonPodNotReady: the pod exists but is not Ready (Ready=False).
	ReadyReasonPodNotReady = "PodNotReady"
	// ReadyReasonPaused: the sandbox is paused and has no pod (Ready=False).
	ReadyReasonPaused = "Paused"
	// PausedReasonPodStopped: SandboxPaused=True, the pod is stopped for a pause.
	PausedReasonPodStopped = "PodStopped"
	// PausedReasonNotPaused: SandboxPaused=False once the sandbox runs again.
	PausedReasonNotPaused = "NotPaused"
	// PausedReasonPodDeleteRefused: SandboxPaused=False, the sandbox is
	// paused but the API server refuses to delete its pod
	// (upgrade.AnnotationPodDeleteError); the message has its words.
	PausedReasonPodDeleteRefused = "PodDeleteRefused"
	// PausedReasonKeptForUpgrade: SandboxPaused=False, the sandbox is paused
	// but its pod runs for its upgrade (woken for it, or paused mid-stage:
	// upgrade.KeepAwake), and stops once the upgrade ends.
	PausedReasonKeptForUpgrade = "KeptForUpgrade"
)

// desiredSandboxStatus recomputes sb's status from its spec, its upgrade
// record (the UpgradeAttempt and Upgrading conditions, which only the event
// handler changes) and its pod (nil when it has none):
//  1. observedGeneration, updateRevision (hash of spec.template);
//  2. podInfo, sandboxIp, nodeName from the pod;
//  3. the base phase and Ready: no pod → Pending (Paused when spec.paused),
//     pod Running and Ready → Running with Ready=True/PodReady;
//  4. the upgrade overlay: while an attempt is in a stage or failed, phase
//     Upgrading (Resuming while a paused sandbox is woken for it) and
//     Ready=False/Upgrading, and a failure's message as
//     status.message; a Succeeded attempt leaves the base rules alone.
//
// Conditions go through meta.SetStatusCondition, so lastTransitionTime moves
// only when a condition's status flips.
func desiredSandboxStatus(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod) agentsv1alpha1.SandboxStatus {
	st := *sb.Status.DeepCopy()
	st.ObservedGeneration = sb.Generation
	if sb.Spec.Template != nil {
		if rev, err := upgrade.Revision(sb.Spec.Template); err == nil {
			st.UpdateRevision = rev
		}
	}

	st.PodInfo, st.SandboxIP, st.NodeName = agentsv1alpha1.PodInfo{}, "", ""
	if pod != nil {
		st.PodInfo = agentsv1alpha1.PodInfo{PodIP: pod.Status.PodIP, NodeName: pod.Spec.NodeName, PodUID: pod.UID}
		st.SandboxIP, st.NodeName = pod.Status.PodIP, pod.Spec.NodeName
	}

	ready := metav1.Condition{Type: agentsv1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: sb.Generation}
	// A paused sandbox whose pod is kept for an upgrade (woken for it, or
	// paused mid-stage) and was seen running is not stopped for the pause
	// when it has no pod for a moment: UpgradePod replaces it. (Before its
	// woken pod runs, it is still the paused sandbox it was.)
	paused := sb.Spec.Paused && pod == nil
	if c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionSandboxPaused); paused && upgrade.KeepAwake(sb) && c != nil && c.Status == metav1.ConditionFalse {
		paused = false
	}
	switch {
	case pod == nil && paused:
		st.Phase = agentsv1alpha1.SandboxPaused
		ready.Reason, ready.Message = ReadyReasonPaused, "sandbox is paused"
	case pod == nil && sb.Spec.TemplateProblem() != "":
		st.Phase = agentsv1alpha1.SandboxPending
		ready.Reason = agentsv1alpha1.ReadyReasonPodCreateFailed
		ready.Message = agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("pod %s is not created: %s", sb.Name, sb.Spec.TemplateProblem()))
	case pod == nil && sb.Spec.Template == nil:
		st.Phase = agentsv1alpha1.SandboxPending
		ready.Reason = agentsv1alpha1.ReadyReasonPodCreateFailed
		ready.Message = fmt.Sprintf("pod %s is not created: %s", sb.Name, agentsv1alpha1.NoTemplateProblem)
	case pod == nil && sb.Annotations[upgrade.AnnotationPodCreateError] != "":
		st.Phase = agentsv1alpha1.SandboxPending
		ready.Reason, ready.Message = agentsv1alpha1.ReadyReasonPodCreateFailed, podCreateFailedMessage(sb)
	case pod == nil:
		st.Phase = agentsv1alpha1.SandboxPending
		ready.Reason, ready.Message = ReadyReasonPodNotCreated, fmt.Sprintf("pod %s does not exist yet", sb.Name)
	case pod.Status.Phase == corev1.PodSucceeded:
		st.Phase = agentsv1alpha1.SandboxSucceeded
		ready.Reason, ready.Message = ReadyReasonPodNotReady, fmt.Sprintf("pod %s has succeeded", pod.Name)
	case pod.Status.Phase == corev1.PodFailed:
		st.Phase = agentsv1alpha1.SandboxFailed
		ready.Reason, ready.Message = ReadyReasonPodNotReady, podFailedMessage(pod)
	case podReady(pod):
		st.Phase = agentsv1alpha1.SandboxRunning
		ready.Status, ready.Reason = metav1.ConditionTrue, agentsv1alpha1.ReadyReasonPodReady
	default:
		st.Phase = agentsv1alpha1.SandboxPending
		ready.Reason, ready.Message = ReadyReasonPodNotReady, podNotReadyMessage(pod)
	}
	// The MESSAGE column says why a sandbox is not running (a container
	// waiting on its image, a template the API server refuses); an upgrade's
	// failure replaces it below.
	st.Message = ""
	if st.Phase == agentsv1alpha1.SandboxPending || st.Phase == agentsv1alpha1.SandboxFailed {
		st.Message = ready.Message
	}
	switch {
	case paused:
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionSandboxPaused, Status: metav1.ConditionTrue,
			Reason: PausedReasonPodStopped, Message: "the pod is stopped for a pause", ObservedGeneration: sb.Generation})
	case sb.Spec.Paused && !upgrade.KeepAwake(sb) && pod != nil && sb.Annotations[upgrade.AnnotationPodDeleteError] != "":
		msg := podDeleteRefusedMessage(sb)
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionSandboxPaused, Status: metav1.ConditionFalse,
			Reason: PausedReasonPodDeleteRefused, Message: msg, ObservedGeneration: sb.Generation})
		st.Message = msg
	case sb.Spec.Paused && upgrade.KeepAwake(sb):
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionSandboxPaused, Status: metav1.ConditionFalse,
			Reason: PausedReasonKeptForUpgrade, Message: "spec.paused is true: the pod runs for the sandbox's upgrade, and is stopped once the upgrade ends", ObservedGeneration: sb.Generation})
	case meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionSandboxPaused) != nil:
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionSandboxPaused, Status: metav1.ConditionFalse,
			Reason: PausedReasonNotPaused, ObservedGeneration: sb.Generation})
	}

	if up := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionUpgrading); up != nil &&
		(upgrade.InProgress(up.Reason) || agentsv1alpha1.IsUpgradingFailedReason(up.Reason)) {
		st.Phase = agentsv1alpha1.SandboxUpgrading
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, agentsv1alpha1.ReadyReasonUpgrading, agentsv1alpha1.ReadyMessageUpgrading
		// The pod's own words wait for the upgrade's end: while a stage
		// runs the pod comes and goes, and each of its words would be one
		// more status write.
		st.Message = ""
		if why, stuck := unschedulable(pod); stuck && (up.Reason == agentsv1alpha1.UpgradingReasonUpgradePod || up.Reason == agentsv1alpha1.UpgradingReasonResuming) {
			// Except one that holds for minutes, until the stage's deadline:
			// a pod the scheduler cannot place (the new one, or the one that
			// wakes a paused sandbox) says so now, not then.
			what, check := "the new pod", "the patch's nodeSelector, affinity, tolerations and resources"
			if _, direct := upgrade.DirectAttemptGeneration(upgrade.CurrentAttempt(sb)); direct {
				check = "the nodeSelector, affinity, tolerations and resources of the sandbox's spec.template (its direct upgrade's edit)"
			}
			if up.Reason == agentsv1alpha1.UpgradingReasonResuming {
				what, check = "the pod that wakes the paused sandbox", "the sandbox template's nodeSelector, affinity, tolerations and resources"
			}
			st.Message = agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("%s: %s %s cannot be scheduled: %s; the stage fails at its deadline unless a node fits it: check %s (`kubectl describe pod %s -n %s`)",
				up.Reason, what, pod.Name, why, check, pod.Name, pod.Namespace))
		}
		if agentsv1alpha1.IsUpgradingFailedReason(up.Reason) {
			_, direct := upgrade.DirectAttemptGeneration(upgrade.CurrentAttempt(sb))
			switch {
			case podRefusedAfterFailure(sb, pod):
				st.Message = podRefusedAfterFailureMessage(sb, up.Message)
			case !direct && !claimedForCurrent(sb):
				st.Message = unclaimedFailureMessage(up.Message)
			default:
				st.Message = failureWithNextStep(sb, upgrade.CurrentAttempt(sb), up.Message)
			}
		}
		if up.Reason == agentsv1alpha1.UpgradingReasonResuming {
			st.Phase = agentsv1alpha1.SandboxResuming
		}
	}
	if sb.DeletionTimestamp != nil {
		st.Phase = agentsv1alpha1.SandboxTerminating
	}
	setCondition(&st.Conditions, ready)
	return st
}

// recordTransition writes an event's transition into the upgrade record:
// UpgradeAttempt (True, reason = the stage, message = the attempt id, and
// lastTransitionTime = when the attempt entered this stage, which the
// watchdog measures stage deadlines from) and Upgrading (reason = the
// stage, True only for Succeeded, message = the failure's message).
func recordTransition(conds *[]metav1.Condition, tr transition, generation int64, now metav1.Time) {
	prev := meta.FindStatusCondition(*conds, upgrade.ConditionAttempt)
	moved := prev == nil || prev.Reason != tr.To || prev.Message != tr.Attempt
	setCondition(conds, metav1.Condition{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue,
		Reason: tr.To, Message: tr.Attempt, ObservedGeneration: generation})
	if moved {
		meta.FindStatusCondition(*conds, upgrade.ConditionAttempt).LastTransitionTime = now
	}
	setCondition(conds, metav1.Condition{Type: agentsv1alpha1.ConditionUpgrading, Status: agentsv1alpha1.UpgradingConditionStatus(tr.To),
		Reason: tr.To, Message: tr.Message, ObservedGeneration: generation})
}

// setCondition is meta.SetStatusCondition with the message capped.
func setCondition(conds *[]metav1.Condition, c metav1.Condition) {
	c.Message = agentsv1alpha1.TruncateConditionMessage(c.Message)
	meta.SetStatusCondition(conds, c)
}

func podReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// unschedulable says why the scheduler cannot place pod (its PodScheduled
// condition, reason Unschedulable), and whether that is so.
func unschedulable(pod *corev1.Pod) (string, bool) {
	if pod == nil || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		return "", false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}

// podNotReadyMessage says what the sandbox's pod is doing: its phase, its
// Ready condition's message, and what holds its containers (waiting on an
// image or a crash loop, or exited with an error), which is what a user
// fixes.
func podNotReadyMessage(pod *corev1.Pod) string {
	if pod.DeletionTimestamp != nil {
		return fmt.Sprintf("pod %s is being deleted", pod.Name)
	}
	msg := fmt.Sprintf("pod %s is %s", pod.Name, pod.Status.Phase)
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Message != "" {
			msg += ": " + c.Message
		}
	}
	if held := upgrade.HeldContainers(pod); len(held) > 0 {
		msg += "; " + strings.Join(held, "; ")
	}
	return agentsv1alpha1.TruncateConditionMessage(msg)
}

// podFailedMessage says why the sandbox's pod failed: the kubelet's
// message (an eviction), and the containers that exited with an error
// (a pod under restartPolicy Never or OnFailure whose container ended has
// no message of its own).
func podFailedMessage(pod *corev1.Pod) string {
	msg := fmt.Sprintf("pod %s has failed", pod.Name)
	if pod.Status.Message != "" {
		msg += ": " + pod.Status.Message
	}
	if held := upgrade.HeldContainers(pod); len(held) > 0 {
		msg += "; " + strings.Join(held, "; ")
	}
	return agentsv1alpha1.TruncateConditionMessage(msg)
}

// podDeleteRefusedMessage is SandboxPaused's message while the API server
// refuses to delete a paused sandbox's pod (upgrade.AnnotationPodDeleteError,
// podcycler's record of the refusal): its words, and what to fix.
func podDeleteRefusedMessage(sb *agentsv1alpha1.Sandbox) string {
	return agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("sandbox %s is paused but the API server refuses to delete its pod %s, which keeps running: %s; podcycler keeps trying: fix what refuses it (an admission policy or webhook on pod deletes, podcycler's RBAC), or unpause the sandbox",
		sb.Name, sb.Name, sb.Annotations[upgrade.AnnotationPodDeleteError]))
}

// podRefusedAfterFailure reports whether sb, whose upgrade attempt ended
// failed, has lost its pod since and the API server refuses a new one
// (podcycler's record, upgrade.AnnotationPodCreateError): the failure's own
// message may still say the old pod keeps running.
func podRefusedAfterFailure(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod) bool {
	return pod == nil && !sb.Spec.Paused && sb.Annotations[upgrade.AnnotationPodCreateError] != ""
}

// podRefusedAfterFailureMessage is status.message for podRefusedAfterFailure:
// the refusal first, what to do, then the failure it follows.
func podRefusedAfterFailureMessage(sb *agentsv1alpha1.Sandbox, failure string) string {
	return agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("pod %s is gone and the API server refuses a new one from spec.template: %s; podcycler keeps trying: fix what refuses it (a ResourceQuota, an admission policy), or, when it is the template, create a new SandboxUpdateOps whose patch fixes it (the upgrade continues, its backup kept) or sets it back; the upgrade had failed: %s",
		sb.Name, sb.Annotations[upgrade.AnnotationPodCreateError], failure))
}

// unclaimedSuffix is what a failed sandbox no ops claims any more (its ops
// was deleted) says to do next.
const unclaimedSuffix = "; no SandboxUpdateOps drives it now: to go on from the failed step, create one that selects it (agents.kruise.io/upgrade-failed: \"true\" selects the failed sandboxes) with the cause fixed"

// claimedForCurrent reports whether an ops claims sb for the attempt its
// status shows: its failure is then that ops's, which says what to do. A
// sandbox a new ops has just admitted to resume it is not, until the new
// attempt's start is written (which drops the suffix in the same write).
func claimedForCurrent(sb *agentsv1alpha1.Sandbox) bool {
	ops := sb.Labels[agentsv1alpha1.LabelUpdateOps]
	return ops != "" && upgrade.ClaimedBy(sb, ops, upgrade.CurrentAttempt(sb))
}

// failureWithNextStep is the MESSAGE of a failed sandbox its ops (or its
// own direct upgrade) still claims: the stage's words, and, when they name
// no next step (a hook's exit code and output, the new pod's image pull
// error), what to do next, as the ops's condition would say it. The
// Upgrading condition keeps the stage's words as written.
func failureWithNextStep(sb *agentsv1alpha1.Sandbox, attempt, failure string) string {
	_, direct := upgrade.DirectAttemptGeneration(attempt)
	ops := sb.Labels[agentsv1alpha1.LabelUpdateOps]
	var next string
	switch {
	case ops != "":
		next = opsNextStepFor(ops, sb.Namespace)
		if container, ok := upgrade.ImageNotPulled(failure); ok {
			next = imageNotPulledNextStep(ops, sb.Namespace, container)
		} else if reason, _ := upgrade.ReasonFor(sb, attempt); reason == agentsv1alpha1.UpgradingReasonPostUpgradeFailed && !upgrade.ChecksPoint(sb, attempt) {
			next = restoreNextStep(ops, sb.Namespace, sb.Spec.Paused)
		} else if reason == agentsv1alpha1.UpgradingReasonPreUpgradeFailed && agentruntime.HookExited(failure) {
			next = backupScriptNextStep(ops, sb.Namespace, sb.Spec.Paused)
		}
	case direct:
		next = directNextStep
	default:
		return failure
	}
	return failureWithNextStepOf(failure, next)
}

// failureWithNextStepOf is failure with next added, unless failure says
// what to do itself (as failureWithNextStep decides).
func failureWithNextStepOf(failure, next string) string {
	if strings.Contains(failure, "SandboxUpdateOps") || strings.Contains(failure, "kubectl molt retry") || strings.Contains(failure, "change spec.template again") {
		return failure
	}
	return upgrade.WithNote(failure, next)
}

// opsDeletedNextStep is what a sandbox that ops, being deleted, failed
// says to do next: no retry of an ops that is going away.
func opsDeletedNextStep(ops string) string {
	return fmt.Sprintf("SandboxUpdateOps %s, which is being deleted, stopped this sandbox here: fix the cause, then create a new SandboxUpdateOps that selects it (with agents.kruise.io/upgrade-failed: \"true\" in its selector it takes only the failed ones): it resumes from the failed step", ops)
}

// opsNextStepFor is what a sandbox that ops ops failed says to do next.
func opsNextStepFor(ops, namespace string) string {
	return fmt.Sprintf("SandboxUpdateOps %s stopped this sandbox here: fix the cause, then, once that ops has ended, `kubectl molt retry %s -n %s` resumes it from the failed step; the retry keeps the ops's patch and hooks, so if one of them is the cause, create a new SandboxUpdateOps with it fixed instead", ops, ops, namespace)
}

// restoreNextStep is what a sandbox whose postUpgrade ops ops failed says to
// do next: its new pod runs, and the workspace the backup holds is not (or
// not wholly) in it; running postUpgrade again on that pod is the way on,
// and the guides' way when the hook itself was wrong is an ops with only the
// fixed postUpgrade.
func restoreNextStep(ops, namespace string, paused bool) string {
	if paused {
		// Paused again once the attempt ended: no pod runs, and the retry
		// wakes the sandbox on a new pod to run postUpgrade there.
		return fmt.Sprintf("SandboxUpdateOps %s stopped this sandbox after its new pod started, without its workspace restored (or only in part; the backup preUpgrade took is where the hook put it); the sandbox is paused again, so no pod of it runs now. Fix the cause, then, once that ops has ended, `kubectl molt retry %s -n %s` wakes it on a new pod of the new template and runs postUpgrade there (a retry of PostUpgrade failures alone carries only the postUpgrade hook); if the hook is the cause, create a new SandboxUpdateOps that selects the sandbox (stateFilter Paused) with only the fixed postUpgrade and no patch, as the guides' restore does", ops, ops, namespace)
	}
	return fmt.Sprintf("SandboxUpdateOps %s stopped this sandbox after its new pod started: the pod runs without its workspace restored (or only in part; the backup preUpgrade took is where the hook put it), so keep its users off it until a postUpgrade succeeds. Fix the cause, then, once that ops has ended, `kubectl molt retry %s -n %s` runs postUpgrade again on this pod (a retry of PostUpgrade failures alone carries only the postUpgrade hook); if the hook is the cause, create a new SandboxUpdateOps that selects the sandbox with only the fixed postUpgrade and no patch, as the guides' restore does", ops, ops, namespace)
}

// backupScriptNextStep is what a sandbox whose preUpgrade script ops ops
// failed (it ran, and exited non-zero) says to do next: the script is the
// likelier cause, which a retry keeps, so that way comes first.
func backupScriptNextStep(ops, namespace string, paused bool) string {
	left := "its pod left as it was"
	if paused {
		left = "nothing of it changed (it is paused again, its pod stopped as before)"
	}
	return fmt.Sprintf("SandboxUpdateOps %s stopped this sandbox before its backup was done, "+left+": if the preUpgrade script is the cause (its output above), create a new SandboxUpdateOps with it fixed, since `kubectl molt retry` keeps the hook and fails the same way; if something the script needs was (a full disk, a missing mount), fix that, then, once that ops has ended, `kubectl molt retry %s -n %s`", ops, ops, namespace)
}

// imageNotPulledNextStep is what a sandbox that ops ops failed because
// container's image cannot be pulled says to do next: a retry keeps the
// patch, which most likely set that image (the ops's condition says whether
// it did, upgrade.ImageNotPulledHint).
func imageNotPulledNextStep(ops, namespace, container string) string {
	return fmt.Sprintf("SandboxUpdateOps %s stopped this sandbox here: if container %s's image name or tag is wrong, `kubectl molt retry` fails the same way (it keeps the patch, and the template keeps the image), so create a new SandboxUpdateOps whose patch sets a working image on it, or the old one to roll back, with the postUpgrade that restores the backup (it resumes the sandbox at UpgradePod, its backup kept); if the registry or its credentials (imagePullSecrets) were the cause, fix them, then, once that ops has ended, `kubectl molt retry %s -n %s`", ops, container, ops, namespace)
}

// unclaimedFailureMessage is the MESSAGE of a failed sandbox no ops claims:
// the failure, cut to leave room for what to do next.
func unclaimedFailureMessage(failure string) string {
	return agentsv1alpha1.TruncateConditionMessageTo(failure, agentsv1alpha1.MaxConditionMessageLength-len(unclaimedSuffix)) + unclaimedSuffix
}

// podCreateFailedMessage is Ready's message while the API server refuses
// the sandbox's pod (upgrade.AnnotationPodCreateError, podcycler's record of
// the refusal): its words, and what to fix.
func podCreateFailedMessage(sb *agentsv1alpha1.Sandbox) string {
	return agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("the API server refuses pod %s: %s; podcycler keeps trying: fix the sandbox's template, or what refuses it (a ResourceQuota, the namespace's Pod Security level, an admission webhook)",
		sb.Name, sb.Annotations[upgrade.AnnotationPodCreateError]))
}
