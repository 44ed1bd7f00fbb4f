package hookrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/upgrade"
)

// HookRunner runs a sandbox's lifecycle hooks inside the sandbox through its
// agent-runtime, between the pipeline's stages.
type HookRunner struct {
	kube      kubernetes.Interface
	agents    versioned.Interface
	publisher *events.Publisher
	exec      func(context.Context, agentruntime.ExecRequest) (agentruntime.Result, error)
	// killRun ends a tagged run the hookrunner gives up following
	// (agentruntime.Kill).
	killRun func(context.Context, agentruntime.ExecRequest) error
	// reachWait is how long an unreachable runtime is retried before the
	// hook fails (a new pod's runtime may start a moment after Ready).
	reachWait time.Duration
}

// step is one of the two hook points.
type step struct {
	stage, failReason, next string
	hook                    string // the lifecycle field, as the user wrote it
}

var (
	preStep  = step{agentsv1alpha1.UpgradingReasonPreUpgrade, agentsv1alpha1.UpgradingReasonPreUpgradeFailed, events.TypePreHookDone, "preUpgrade"}
	postStep = step{agentsv1alpha1.UpgradingReasonPostUpgrade, agentsv1alpha1.UpgradingReasonPostUpgradeFailed, events.TypePostHookDone, "postUpgrade"}
)

// Handle reacts to `patched` (preUpgrade) and `pod-ready` (postUpgrade):
//  1. load the sandbox; skip if it is gone or no longer claimed by the ops,
//     or if this attempt is already past the step;
//  2. a resumed attempt that continues after PreUpgrade skips preUpgrade
//     (the backup it made is kept);
//  3. without a hook, pass the sandbox straight on;
//  4. check the pod, by durable marks: preUpgrade runs only on the pod that
//     existed when the upgrade began (by UID), never on one this attempt or
//     the attempt it resumes built (a redelivered `patched` after the pod
//     was replaced is skipped); postUpgrade only on the pod this attempt (or
//     the one it resumes) built; a pod the attempt kept (it already ran the
//     target template, upgrade.AnnotationPodKept) is passed on without
//     postUpgrade: its workspace is live, a restore would overwrite it;
//  5. the pod already carries this step's done mark for the attempt → the
//     hook ran to success before a crash or a lost message: do not run it
//     again, pass the sandbox on;
//  6. run the hook through the agent-runtime with its timeout, tagged with
//     the attempt and step so that a redelivery after a crash follows the
//     run already started (or ended) instead of running it again (the
//     consume loop keeps the message alive meanwhile), then mark the pod
//     done;
//  7. publish the next event, or `failed` with exit code and output tails.
func (h *HookRunner) Handle(ctx context.Context, msg *events.Message) error {
	ev := msg.Event
	d := ev.Data
	var st step
	switch ev.Type {
	case events.TypePatched:
		st = preStep
	case events.TypePodReady:
		st = postStep
	default:
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("stage", st.stage)
	ctx = klog.NewContext(ctx, logger)

	sb, skip, err := upgrade.LoadClaimed(ctx, h.agents, d.Sandbox.Namespace, d.Sandbox.Name, d.Sandbox.UID, d.Ops.Name, d.Attempt, d.SandboxResourceVersion)
	if err != nil || sb == nil {
		if skip != "" {
			logger.Info("skip: " + skip)
		}
		return err
	}
	if reason, ok := upgrade.ReasonFor(sb, d.Attempt); ok && upgrade.Past(reason, st.stage) {
		logger.Info("skip: attempt already past this step", "reason", reason)
		return nil
	}
	if ev.Redriven {
		// Read from the API server (a re-drive names no resource version):
		// postUpgrade must not run on a pod that is not yet Ready.
		if why := upgrade.RedriveRefusal(sb, d.Attempt, st.stage); why != "" {
			logger.Error(nil, upgrade.RedriveRefused, "event", ev.Type, "why", why, "source", ev.Source, "redrive", d.Redrive)
			return nil
		}
	}

	next := events.Event{Type: st.next, Data: d}
	next.Data.Stage, next.Data.Reason, next.Data.Message = "", "", ""
	if st == preStep && d.Stage != "" && d.Stage != agentsv1alpha1.UpgradingReasonPreUpgrade {
		logger.Info("skip preUpgrade: the resumed attempt continues from " + d.Stage)
		next.Data.Stage = d.Stage
		return h.publish(ctx, next)
	}
	hook := hookFor(sb, d.Attempt, st.stage)
	if hook == nil {
		return h.publish(ctx, next)
	}

	pod, reason, err := h.hookPod(ctx, sb, st, d)
	if err != nil {
		return err // the API server did not answer: redelivered, and failed on the last delivery
	}
	if pod == nil {
		switch reason {
		case "":
			logger.Info("skip preUpgrade: there is no old pod to run it on")
			next.Data.Message = noPodToBackUp
			return h.publish(ctx, next)
		case skipReplaced:
			logger.Info("skip: the pod was already rebuilt by this attempt; preUpgrade is never run on it")
			return nil
		}
		if st == preStep && d.OldPodUID != "" && h.passedOn(ctx, d) {
			// A redelivery after the backup: podcycler took the old pod away
			// to replace it. A failure filed now could reach statusagg
			// before prehook-done does (another subject), and end the
			// attempt in PreUpgradeFailed behind its new pod.
			logger.Info("skip: the old pod is gone, and this attempt's prehook-done was published already")
			return nil
		}
		return h.fail(ctx, next, st, "hook execution error: "+reason, nil)
	}
	if st == postStep && pod.Annotations[upgrade.AnnotationPodKept] == d.Attempt {
		// Not rebuilt: the pod holds the live workspace, and a restore would
		// write a backup (maybe older, maybe cut short by a failed
		// preUpgrade) over it.
		logger.Info("skip postUpgrade: the pod was kept, not rebuilt, and holds its workspace as it was", "pod", klog.KObj(pod), "uid", pod.UID)
		next.Data.Message = keptMessage(pod)
		return h.publish(ctx, next)
	}
	if pod.Annotations[upgrade.HookDoneAnnotation(st.stage)] == d.Attempt {
		logger.Info("skip running the hook: the pod carries its done mark for this attempt", "pod", klog.KObj(pod), "uid", pod.UID)
		next.Data.Message = pod.Annotations[upgrade.HookNoteAnnotation(st.stage)]
		return h.publish(ctx, next)
	}
	if why, wait := noRuntimeAddress(sb, pod, st); why != "" {
		if wait {
			return events.Retry(errors.New(why), podIPRetry)
		}
		return h.fail(ctx, next, st, "hook execution error: "+why, nil)
	}
	started := h.startedBefore(ctx, d, st)
	stageStarted := events.Event{Type: events.TypeStageStarted, Data: withStage(d, st.stage)}
	if !started.IsZero() {
		stageStarted.Data.HookStartedAt = &started
	}
	if err := h.publish(ctx, stageStarted); err != nil {
		return err
	}
	res, err := h.run(ctx, sb, pod, hook, hookTag(d.Attempt, st.stage), started)
	switch {
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return err // shutting down: redeliver to the next runner
	case err != nil:
		message := withRuntimesNote(sb, err, agentruntime.ErrorMessageWithOutput(err, res))
		return h.fail(ctx, next, st, h.withCutShortNote(ctx, st, pod, d, sb.Spec.Paused, err, message), nil)
	case !res.Succeeded():
		code := res.ExitCode
		return h.fail(ctx, next, st, h.withCutShortNote(ctx, st, pod, d, sb.Spec.Paused, nil, res.FailureMessage()), &code)
	}
	code := res.ExitCode
	next.Data.HookExitCode = &code
	// Shown in the history, and for postUpgrade in the Succeeded condition.
	next.Data.Message = res.SuccessNote(st.hook)
	logger.Info("hook succeeded", "reattached", res.Reattached, "stderr", res.Stderr)
	// The hook ran to success: a redelivery would only call the agent-runtime
	// again, and one that no longer knows the ended run (a real one forgets
	// a process once it exits) would run the hook a second time. So the mark
	// and the report are made even if this process is shutting down
	// meanwhile, within finishWait.
	mark, cancelMark := context.WithTimeout(context.WithoutCancel(ctx), finishWait)
	defer cancelMark()
	if err := h.markDoneRetrying(mark, pod, st, d.Attempt, next.Data.Message); err != nil {
		// The attempt moves on; only a redelivery of this message, which
		// the publish below makes unlikely, would miss the mark.
		logger.Error(err, "Hook succeeded but its done mark was not written; passing the sandbox on", "pod", klog.KObj(pod))
	}
	// The report is the only word of the backup a pod deleted meanwhile
	// leaves (its done mark goes with it): a redelivery would then file
	// PreUpgradeFailed, and the resume back an empty pod up over it. So it
	// is tried again through a NATS outage, up to reportWait.
	report, cancelReport := finishing(ctx, finishWait, reportWait)
	defer cancelReport()
	if lost := h.lostDuringHook(report, pod, st); lost != "" {
		return h.fail(report, next, st, lost, &code)
	}
	return h.publishPatiently(report, next)
}

// finishWait bounds the done mark, and then the report, of a hook that
// succeeded, which are made even while the process shuts down.
const finishWait = 15 * time.Second

// markDoneAttempts bounds markDoneRetrying; the waits between them double
// from markDoneWait.
const (
	markDoneAttempts = 5
	markDoneWait     = 200 * time.Millisecond
)

// markDoneRetrying is markDone, made again while the API server fails it
// (a blip, a timeout), so that a hook that ran is not run again for want of
// its mark.
func (h *HookRunner) markDoneRetrying(ctx context.Context, pod *corev1.Pod, st step, attempt, note string) error {
	wait := markDoneWait
	var err error
	for i := 0; i < markDoneAttempts; i++ {
		if err = h.markDone(ctx, pod, st, attempt, note); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
	}
	return err
}

// resumeStep is the next step of a hook not run because its pod is not the
// one the attempt names.
const resumeStep = "create a new SandboxUpdateOps to resume; it continues from the failed step"

// keptMessage is the Succeeded message of an attempt that kept pod: its
// postUpgrade was not run.
func keptMessage(pod *corev1.Pod) string {
	return fmt.Sprintf("pod %s (uid %s) already ran the target template and was kept with its files, not rebuilt; postUpgrade was not run on it, so no backup was restored over its live workspace", pod.Name, pod.UID)
}

// noPodToBackUp is prehook-done's note when the sandbox had no pod to back
// up: `kubectl molt history` shows it, so a preUpgrade not run leaves a trace.
const noPodToBackUp = "preUpgrade was not run: the sandbox had no pod when this upgrade began (it was deleted, or never created), so nothing was backed up; a postUpgrade restore finds only an older backup, if any"

// skipReplaced is hookPod's reason for a preUpgrade whose pod this attempt
// already replaced: the attempt is past the step, nothing is reported.
const skipReplaced = "pod already replaced by this attempt"

// terminatingRetry is how soon a preUpgrade whose pod is being deleted is
// looked at again.
const terminatingRetry = 2 * time.Second

// podIPRetry is how soon a hook whose pod has no IP yet is looked at again.
const podIPRetry = 2 * time.Second

// noRuntimeAddress says why st's hook cannot be sent to pod's agent-runtime ("" when it
// can be tried):
//   - the pod ended (Failed, Succeeded): nothing runs in it, whatever it shows. An ended
//     pod keeps its last IP, which the node may have given to another pod since: a
//     call there would run the hook, and send the sandbox's access token, in a pod that
//     is not the sandbox's (rule 12). The stage fails at once;
//   - the runtime is reached at the pod's IP (agentruntime.BaseURL, as the sandbox has
//     no agents.kruise.io/runtime-url), and the pod has none. Without that check the
//     call would go to "http://:49983", the hookrunner's own host. wait is true: the pod
//     may still get an IP (Pending, or Running before its IP shows), so the message is
//     looked at again (podIPRetry) and its last delivery fails the stage with this
//     reason.
func noRuntimeAddress(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod, st step) (why string, wait bool) {
	phase := pod.Status.Phase
	if phase == "" {
		phase = corev1.PodPending
	}
	where := "not scheduled to a node yet"
	if pod.Spec.NodeName != "" {
		where = "on node " + pod.Spec.NodeName
	}
	ref := fmt.Sprintf("pod %s/%s (uid %s)", pod.Namespace, pod.Name, pod.UID)
	describe := fmt.Sprintf("`kubectl describe pod -n %s %s`", pod.Namespace, pod.Name)
	if phase == corev1.PodFailed || phase == corev1.PodSucceeded {
		next := fmt.Sprintf("it was not run, and no backup was taken of the pod: find out why it stopped (%s) and save what it holds if you need it; once the sandbox has a running pod again (deleting this one makes molt create a new one), create a new SandboxUpdateOps to resume; it continues from the failed step", describe)
		if st == postStep {
			next = fmt.Sprintf("it was not run: find out why the pod stopped (%s) and fix the cause (the patch, the sandbox's template); then create a new SandboxUpdateOps to resume: it rebuilds the pod and runs postUpgrade on it, and any backup preUpgrade made is kept", describe)
		}
		ip := "has no IP"
		if pod.Status.PodIP != "" {
			ip = "its last IP " + pod.Status.PodIP + " may belong to another pod now"
		}
		return fmt.Sprintf("%s is %s (%s): nothing runs in it, and %s, so %s cannot run in it; %s",
			ref, phase, where, ip, st.hook, next), false
	}
	if sb.Annotations[agentsv1alpha1.AnnotationRuntimeURL] != "" || pod.Status.PodIP != "" {
		return "", false
	}
	return fmt.Sprintf("%s is %s (%s) and has no IP yet, so %s cannot run in it yet: its agent-runtime is reached at the pod's IP (the sandbox sets no %s); if it stays so, find out why (%s), and once the pod runs create a new SandboxUpdateOps to resume; it continues from the failed step",
		ref, phase, where, st.hook, agentsv1alpha1.AnnotationRuntimeURL, describe), true
}

// markDone records on the pod, with a UID precondition, that st's hook ran
// to success for attempt, so a redelivery does not run it again.
func (h *HookRunner) markDone(ctx context.Context, pod *corev1.Pod, st step, attempt, note string) error {
	// The hook's note (its stderr, upgrade.HookNoteAnnotation) goes with the
	// mark, so a report sent again from the mark carries it; null removes an
	// earlier attempt's.
	var noteValue any
	if note != "" {
		noteValue = note
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]any{upgrade.HookDoneAnnotation(st.stage): attempt, upgrade.HookNoteAnnotation(st.stage): noteValue},
	}})
	if err != nil {
		return fmt.Errorf("encode done mark of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	_, err = h.kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// The pod is gone or replaced: nobody can run the hook on it again.
		return nil
	}
	if err != nil {
		return fmt.Errorf("mark %s done on pod %s/%s: %w", st.stage, pod.Namespace, pod.Name, err)
	}
	return nil
}

// hookPod returns the pod the hook may run on. A nil pod with an empty
// reason means there is nothing to run on (preUpgrade without a pod); an
// error, that the API server did not answer (the message is retried).
func (h *HookRunner) hookPod(ctx context.Context, sb *agentsv1alpha1.Sandbox, st step, d events.Data) (*corev1.Pod, string, error) {
	pod, err := h.kube.CoreV1().Pods(sb.Namespace).Get(ctx, sb.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if st == preStep && d.OldPodUID == "" {
			return nil, "", nil
		}
		if st == preStep {
			return nil, fmt.Sprintf("pod %s/%s was deleted during the upgrade, before molt knew of a backup of it: what it held outside its persistent volumes is gone with it. The upgrade that resumes the sandbox may run preUpgrade on the pod it gets next, backing that new pod up where the last backup is: if a backup there must be kept (an earlier upgrade's, or this one's, when its preUpgrade ran before a crash or a NATS outage kept its report), copy it away first", sb.Namespace, sb.Name), nil
		}
		return nil, fmt.Sprintf("pod %s/%s was deleted during the upgrade, before its %s was reported done: a new SandboxUpdateOps resumes the sandbox", sb.Namespace, sb.Name, st.hook), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("get pod %s/%s to run %s: %w", sb.Namespace, sb.Name, st.hook, err)
	}
	if !upgrade.ControlledBy(pod, sb.UID) {
		return nil, fmt.Sprintf("pod %s/%s (uid %s) is not controlled by sandbox %s (uid %s), so molt does not run %s in it (an earlier sandbox's pod, waiting for the garbage collector?); it was not run: once that pod is gone, create a new SandboxUpdateOps to resume", sb.Namespace, sb.Name, pod.UID, sb.Name, sb.UID, st.hook), nil
	}
	if st == preStep {
		if upgrade.BuiltBy(pod, d.Attempt) {
			return nil, skipReplaced, nil
		}
		if pod.UID == d.OldPodUID && pod.Annotations[upgrade.HookDoneAnnotation(st.stage)] == d.Attempt {
			// The backup was taken (a redelivery after the done mark, and maybe
			// after prehook-done, which podcycler may be acting on by deleting
			// the pod): Handle passes the sandbox on, whatever the pod does now.
			return pod, "", nil
		}
		if pod.DeletionTimestamp != nil && pod.UID == d.OldPodUID {
			// A backup taken from a stopping pod could be cut short over the
			// good one. Looked at again once the pod is gone: then this is
			// "deleted during the upgrade" (a failure statusagg drops if a
			// later stage already started, as after podcycler replaced it).
			return nil, "", events.Retry(fmt.Errorf("pod %s/%s (uid %s) is being deleted: preUpgrade is not run on a stopping pod", pod.Namespace, pod.Name, pod.UID), terminatingRetry)
		}
		if upgrade.BuiltByResumed(pod, sb, d.Attempt, d.ResumedAttempt) {
			return nil, fmt.Sprintf("pod %s (uid %s) was built by the failed attempt %s and holds no workspace to back up; preUpgrade was not run, so the backup that attempt made is kept", pod.Name, pod.UID, d.ResumedAttempt), nil
		}
		if d.OldPodUID == "" {
			return nil, fmt.Sprintf("no pod existed when the upgrade began, and pod %s (uid %s) was created since; preUpgrade runs only on the pod that existed then, so it was not run: %s", pod.Name, pod.UID, resumeStep), nil
		}
		if pod.UID != d.OldPodUID {
			return nil, fmt.Sprintf("preUpgrade must run on the pod that existed when the upgrade began (uid %s), but pod %s now has uid %s; it was not run: %s", d.OldPodUID, pod.Name, pod.UID, resumeStep), nil
		}
		return pod, "", nil
	}
	if !upgrade.BuiltBy(pod, d.Attempt) && !upgrade.BuiltByResumed(pod, sb, d.Attempt, d.ResumedAttempt) {
		return nil, fmt.Sprintf("postUpgrade runs only on the pod this upgrade built, but pod %s (uid %s) was not built by attempt %s; it was not run: create a new SandboxUpdateOps to resume; it takes that pod for the sandbox's original one and starts again from preUpgrade", pod.Name, pod.UID, d.Attempt), nil
	}
	if d.NewPodUID != "" && pod.UID != d.NewPodUID {
		return nil, fmt.Sprintf("postUpgrade must run on the new pod (uid %s), but pod %s now has uid %s; it was not run: %s", d.NewPodUID, pod.Name, pod.UID, resumeStep), nil
	}
	if pod.DeletionTimestamp != nil {
		// A restore into a stopping pod goes with it (done or not), and the
		// attempt would end Succeeded on the empty pod built next (its
		// checkpoint, its backup deleted as restored). Looked at again once
		// it is gone: then this is "deleted during the upgrade".
		return nil, "", events.Retry(fmt.Errorf("pod %s/%s (uid %s) is being deleted: postUpgrade is not run on a stopping pod", pod.Namespace, pod.Name, pod.UID), terminatingRetry)
	}
	return pod, "", nil
}

// hookTag names one run of a hook on the agent-runtime: a hookrunner that
// restarted mid-hook, or a redelivery, follows that run to its end instead
// of running the hook a second time.
func hookTag(attempt, stage string) string {
	return "molt/" + attempt + "/" + stage
}

// maxResets bounds how often one hook call is made again after the
// agent-runtime reset the connection.
const maxResets = 3

// run calls the agent-runtime, retrying while it is not reachable yet, and up
// to maxResets times when it reset the connection mid-call: the call carries
// the hook's tag, so a retry follows the run that may have started instead of
// starting a second one.
//
// started, when not zero, is when an earlier delivery started the hook
// (startedBefore): a run of the tag still there is followed only until
// started plus the hook's timeout.
func (h *HookRunner) run(ctx context.Context, sb *agentsv1alpha1.Sandbox, pod *corev1.Pod, hook *agentsv1alpha1.UpgradeAction, tag string, started time.Time) (agentruntime.Result, error) {
	req := agentruntime.ExecRequest{
		BaseURL:     agentruntime.BaseURL(sb.Annotations, pod.Status.PodIP),
		AccessToken: agentruntime.AccessToken(sb.Annotations),
		Command:     hook.Exec.Command,
		Timeout:     hook.Timeout(),
		Tag:         tag,
	}
	if !started.IsZero() && req.Timeout > 0 {
		// The first delivery may have waited up to reachWait for the
		// runtime before the run began. (A run a later delivery started
		// afresh, after one that died before its start, is still counted
		// from the first: two crashes mid-hook, rare, can cut it short.)
		req.FollowDeadline = started.Add(req.Timeout + h.reachWait)
	}
	deadline := time.Now().Add(h.reachWait)
	resets := 0
	for {
		start := time.Now()
		res, err := h.exec(ctx, req)
		switch {
		case errors.Is(err, agentruntime.ErrConnectionLost) && req.Tag != "" && resets < maxResets:
			// The connection may have gone with the pod: then its IP may
			// belong to another pod by now, whose runtime would refuse the
			// token, and the message would blame the token.
			if gone := h.podGone(ctx, pod); gone != "" {
				return res, podGoneError{fmt.Errorf("%s, so the hook was cut short: %w", gone, err)}
			}
			if req.Deadline.IsZero() {
				// The run may have started in this call: timeoutSeconds
				// is the run's, so the calls that follow it end at the
				// same deadline instead of getting it afresh each.
				req.Deadline = start.Add(req.Timeout)
			}
			resets++
			// It answered a moment ago: a restart of it (or of what is in
			// front of it) gets the whole wait again.
			deadline = time.Now().Add(h.reachWait)
			klog.FromContext(ctx).Info("Agent-runtime reset the connection; calling again to follow the hook's run", "tag", req.Tag, "resets", resets, "err", err)
		case err != nil && resets > 0 && !errors.Is(err, agentruntime.ErrTimeout) && (!errors.Is(err, agentruntime.ErrUnreachable) || time.Now().After(deadline)):
			// Given up on after the run may have started: it is ended, so it
			// does not go on beside the attempt that resumes this one; when
			// that cannot be done either, the message says so.
			if kerr := h.kill(ctx, req); kerr != nil {
				return res, fmt.Errorf("%w (after %d connection resets; the hook had started and may still be running in the sandbox, as killing it failed too: %v; check it before a new SandboxUpdateOps runs it again)", err, resets, kerr)
			}
			return res, fmt.Errorf("%w (after %d connection resets; the hook's run was killed)", err, resets)
		case errors.Is(err, agentruntime.ErrUnreachable) && time.Now().After(deadline):
			return res, fmt.Errorf("%w (for %s; the address is from %s: check that the sandbox's agent-runtime runs and that the address is right)", err, h.reachWait, agentruntime.BaseURLSource(sb.Annotations))
		case !errors.Is(err, agentruntime.ErrUnreachable):
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// startedBefore returns when an earlier delivery of this message (before a
// crash, or a watchdog's re-drive) started st's hook for the attempt: the
// time of the first stage-started published for it (the last one the stream
// keeps carries it as HookStartedAt, or is the first); zero when none was or
// the stream cannot tell. The hook's timeout counts from then, so a run that
// outlived its hookrunner does not get its whole timeout again.
func (h *HookRunner) startedBefore(ctx context.Context, d events.Data, st step) time.Time {
	prev, err := h.publisher.LastEvent(ctx, d.Sandbox.Namespace, d.Sandbox.Name, d.Sandbox.UID, events.TypeStageStarted)
	if err != nil {
		klog.FromContext(ctx).Info("Cannot read from the stream whether an earlier delivery started the hook; a run of it still there gets its whole timeout", "err", err)
		return time.Time{}
	}
	if prev == nil || prev.Data.Attempt != d.Attempt || prev.Data.Stage != st.stage {
		return time.Time{}
	}
	if prev.Data.HookStartedAt != nil {
		return *prev.Data.HookStartedAt
	}
	return prev.Time
}

// passedOn reports whether the stream holds this attempt's prehook-done for
// the sandbox: its preUpgrade ran and was passed on. A stream it cannot read
// counts as not (the step fails as it would without the check).
func (h *HookRunner) passedOn(ctx context.Context, d events.Data) bool {
	prev, err := h.publisher.LastEvent(ctx, d.Sandbox.Namespace, d.Sandbox.Name, d.Sandbox.UID, events.TypePreHookDone)
	if err != nil {
		klog.FromContext(ctx).Info("Cannot read from the stream whether preUpgrade was passed on already", "err", err)
		return false
	}
	return prev != nil && prev.Data.Attempt == d.Attempt
}

// kill ends the run of req's tag (killRun); an error when it cannot.
func (h *HookRunner) kill(ctx context.Context, req agentruntime.ExecRequest) error {
	if h.killRun == nil {
		return errors.New("no way to kill it")
	}
	return h.killRun(ctx, req)
}

func (h *HookRunner) fail(ctx context.Context, next events.Event, st step, message string, code *int32) error {
	klog.FromContext(ctx).Info("hook failed", "message", message)
	out := events.Event{Type: events.TypeFailed, Data: next.Data}
	out.Data.Stage = st.stage
	out.Data.Reason = st.failReason
	out.Data.Message = agentsv1alpha1.TruncateConditionMessage(message)
	out.Data.HookExitCode = code
	return h.publish(ctx, out)
}

func (h *HookRunner) publish(ctx context.Context, ev events.Event) error {
	if err := h.publisher.Publish(ctx, ev); err != nil {
		return fmt.Errorf("publish %s for %s: %w", ev.Type, ev.SandboxKey(), err)
	}
	return nil
}

func withStage(d events.Data, stage string) events.Data {
	d.Stage, d.Reason, d.Message = stage, "", ""
	return d
}

// hookFor is the hook attempt runs at stage on sb: from the hooks fixed as
// it began (upgrade.HooksFor), not a spec.lifecycle edited since.
func hookFor(sb *agentsv1alpha1.Sandbox, attempt, stage string) *agentsv1alpha1.UpgradeAction {
	lc := upgrade.HooksFor(sb, attempt)
	if lc == nil {
		return nil
	}
	if stage == agentsv1alpha1.UpgradingReasonPreUpgrade {
		return lc.PreUpgrade
	}
	return lc.PostUpgrade
}
