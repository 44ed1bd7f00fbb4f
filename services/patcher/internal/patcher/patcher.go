package patcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	listers "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// Patcher writes the ops patch into each requested sandbox's spec.
type Patcher struct {
	agents    versioned.Interface
	kube      kubernetes.Interface
	ops       listers.SandboxUpdateOpsLister
	publisher *events.Publisher
	// wakeTimeout bounds the wait for a woken paused sandbox's pod.
	wakeTimeout time.Duration
}

// Handle reacts to `requested`:
//  1. load the sandbox and the ops; skip if either is gone or the sandbox is
//     no longer claimed by this ops (a stale event); a direct upgrade (no
//     ops) keeps the template the user wrote;
//  2. skip if this attempt already went past PreUpgrade (by its status, or
//     by a pod this attempt built: durable proof that survives a lagging
//     status);
//  3. a paused sandbox the ops woke (upgrade.AdmittedToWake, also once its
//     user unpaused it): wait until its pod, built by podcycler from the old
//     template, is Ready (Resuming), and report ResumeSucceed; a pod not Ready
//     in time fails it (PreUpgradeFailed) before anything was patched; a
//     fresh attempt with no pod and a preUpgrade hook fails PreUpgrade
//     (noPodToBackUp), as does a resume of a failure before the backup;
//  4. apply the ops patch to the template (strategic merge on raw bytes); a
//     patch that fails on this sandbox's template fails it as
//     PreUpgradeFailed (the stage the patch belongs to) and touches nothing;
//  5. write template and lifecycle in one update carrying the
//     resourceVersion read (nothing is written when nothing changes;
//     spec.upgradePolicy is left as the user set it); a write the API server
//     refuses for good while the sandbox is still as read (writeSpec) fails
//     it as PreUpgradeFailed at once, in the server's words;
//  6. publish `patched` with the target revision and the pod that exists now;
//     a resumed attempt continues from upgrade.ResumeAt (never skipping a
//     backup the original pod can still give), straight to `pod-ready` when
//     it resumes at PostUpgrade.
func (p *Patcher) Handle(ctx context.Context, msg *events.Message) error {
	ev := msg.Event
	d := ev.Data
	logger := klog.FromContext(ctx).WithValues("stage", agentsv1alpha1.UpgradingReasonPreUpgrade)
	ctx = klog.NewContext(ctx, logger)
	if ev.Type != events.TypeRequested {
		return nil
	}

	sb, skip, err := upgrade.LoadClaimed(ctx, p.agents, d.Sandbox.Namespace, d.Sandbox.Name, d.Sandbox.UID, d.Ops.Name, d.Attempt, d.SandboxResourceVersion)
	if err != nil || sb == nil {
		if skip != "" {
			logger.Info("skip: " + skip)
		}
		return err
	}
	if reason, ok := upgrade.ReasonFor(sb, d.Attempt); ok && upgrade.Past(reason, agentsv1alpha1.UpgradingReasonPreUpgrade) {
		logger.Info("skip: attempt already past PreUpgrade", "reason", reason)
		return nil
	}
	if ev.Redriven {
		// Read from the API server (a re-drive names no resource version).
		if why := upgrade.RedriveRefusal(sb, d.Attempt, agentsv1alpha1.UpgradingReasonResuming); why != "" {
			logger.Error(nil, upgrade.RedriveRefused, "event", ev.Type, "why", why, "source", ev.Source, "redrive", d.Redrive)
			return nil
		}
	}
	pod, err := p.currentPod(ctx, sb)
	if err != nil {
		return err
	}
	if upgrade.BuiltBy(pod, d.Attempt) {
		logger.Info("skip: the pod was already rebuilt by this attempt", "pod", klog.KObj(pod), "uid", pod.UID)
		return nil
	}
	// Woken once already: an earlier delivery patched the sandbox while it
	// had its woken pod (the template it replaced is kept for this attempt
	// only then). Not waited for again: with no pod now, nothing would wake
	// it in this stage; the checks below go on with the pod there is.
	patchedBefore := d.ResumedReason == "" && upgrade.PatchedForFresh(sb, d.Attempt)
	// Or its status shows the wake-up done (a resume carries no mark of its
	// patch): podcycler builds no pod for it past Resuming, and a wait would
	// end in a false "will not be Ready" after the whole wake timeout.
	reason, _ := upgrade.ReasonFor(sb, d.Attempt)
	wokenBefore := reason == agentsv1alpha1.UpgradingReasonResumeSucceed || reason == agentsv1alpha1.UpgradingReasonPreUpgrade
	if upgrade.AdmittedToWake(sb) && !patchedBefore && !wokenBefore {
		if why := unusableTemplate(sb, d.Ops.Name); why != "" {
			// No pod can be built to wake it: said now, not after the
			// wake-up's deadline as a pod that never came (unless its ops
			// is gone: then nothing is filed for it).
			if _, gone, err := p.opsOf(ctx, d); err != nil || gone {
				if gone {
					logger.Info("skip: ops is gone")
				}
				return err
			}
			return p.fail(ctx, ev, why)
		}
		woken, problem, err := p.waitAwake(ctx, sb, d.ResumedAttempt)
		if errors.Is(err, errSandboxGone) {
			logger.Info("skip: the sandbox was deleted during its wake-up")
			return nil
		}
		if err != nil {
			return err
		}
		if problem != "" {
			return p.failWake(ctx, ev, problem)
		}
		pod = woken
		if err := p.publish(ctx, ev, events.TypeStageStarted, func(out *events.Data) {
			out.Stage = agentsv1alpha1.UpgradingReasonResumeSucceed
			out.OldPodUID = pod.UID
		}); err != nil {
			return err
		}
		logger.Info("paused sandbox woken with its old template", "pod", klog.KObj(pod), "uid", pod.UID)
	}
	target := sb.Spec.Template
	version := sb.ResourceVersion // what the next stage reads at least (events.Data.SandboxResourceVersion)
	// Whether the attempt checkpoints (events.Data.Checkpoint): a direct
	// attempt's policy, an ops's strategy.
	checkpoints := upgrade.ChecksPoint(sb, d.Attempt)
	if d.Ops.Name != "" {
		ops, gone, err := p.opsOf(ctx, d)
		if gone {
			logger.Info("skip: ops is gone")
			return nil
		}
		if err != nil {
			return err
		}
		if problem := upgrade.PatchProblem(ops); problem != "" {
			return p.fail(ctx, ev, fmt.Sprintf("SandboxUpdateOps %s: %s; the patcher did not apply it to this sandbox, and its pod was not touched%s", ops.Name, problem, pausedAgain(sb)))
		}
		checkpoint := ops.Spec.UpdateStrategy.EffectiveType() == agentsv1alpha1.UpgradeTypeCheckpointRestore
		checkpoints = checkpoint
		if checkpoint {
			if sets, _ := upgrade.SetsImage(ops.Spec.Patch.Raw); sets {
				return p.failCheckpoint(ctx, ev, ops)
			}
		}
		if why := unusableTemplate(sb, ops.Name); why != "" {
			return p.fail(ctx, ev, why)
		}
		_, _, resumes := upgrade.Resumes(sb, d.Attempt)
		backs := ops.Spec.Lifecycle != nil && ops.Spec.Lifecycle.PreUpgrade != nil
		if pod == nil && backs && d.ResumedReason != "" && upgrade.ResumeStage(d.ResumedReason) == agentsv1alpha1.UpgradingReasonPreUpgrade &&
			!upgrade.MayHaveReplacedPod(sb, d.Attempt, d.ResumedReason) {
			// The failed chain never got past its backup, and the sandbox
			// has no pod to take one from: going on at UpgradePod
			// (upgrade.ResumeAt) would let postUpgrade restore an older
			// backup over what its volumes hold.
			return p.fail(ctx, ev, noPodToBackUp(sb, ops, true))
		}
		if pod == nil && d.ResumedReason == "" && !resumes && backs {
			if upgrade.PatchedForFresh(sb, d.Attempt) {
				// An earlier delivery patched it while it had a pod (the
				// template it replaced is kept for this attempt only then):
				// hookrunner backs that pod up, or fails the stage as it
				// is gone, and UpgradePod may be replacing it right now. A
				// failure filed here could beat its prehook-done to
				// statusagg; if patched was never published, the watchdog
				// fails the stage at its deadline.
				logger.Info("skip: an earlier delivery patched the sandbox while it had a pod; its preUpgrade is hookrunner's")
				return nil
			}
			return p.fail(ctx, ev, noPodToBackUp(sb, ops, false))
		}
		target, err = upgrade.ApplyPatch(sb.Spec.Template, ops.Spec.Patch.Raw)
		if err != nil {
			return p.fail(ctx, ev, fmt.Sprintf("spec.patch of SandboxUpdateOps %s cannot be applied to this sandbox's template: %v; the sandbox and its pod were not changed%s: fix the patch (or the sandbox's template) and create a new SandboxUpdateOps", ops.Name, err, pausedAgain(sb)))
		}
		if why := addedWithoutImage(sb, ops); why != "" {
			return p.fail(ctx, ev, why)
		}
		// The template it replaces is kept only when there is a pod to
		// back up: a sandbox with no pod (and no preUpgrade to take a
		// backup) gets its first one from the patched template.
		written, refused, stored, err := p.writeSpec(ctx, sb, ops, target, checkpoint, d.Attempt, d.ResumedReason == "" && !resumes && pod != nil)
		if err != nil {
			return err
		}
		if refused != "" {
			return p.fail(ctx, ev, fmt.Sprintf("the API server refused the patched template of sandbox %s/%s (SandboxUpdateOps %s): %s; nothing was changed, preUpgrade did not run and the old pod was not touched (a paused sandbox woken for the upgrade is paused again): fix the cause (an admission policy or webhook, the patcher's RBAC, or the patch), then create a new SandboxUpdateOps",
				sb.Namespace, sb.Name, ops.Name, refused))
		}
		if written != "" {
			version = written
		}
		if stored != nil {
			// The template as the API server stored it: a mutating
			// admission webhook may have rewritten it (an image pinned to
			// its digest), and the pod is built from what is stored.
			target = stored
		}
	} else {
		if why := directWithoutPod(sb, pod, d, msg.NumDelivered <= 1); why != "" {
			return p.fail(ctx, ev, why)
		}
		if revision, err := upgrade.Revision(sb.Spec.Template); err == nil {
			if why := rebuiltSinceRequest(sb, pod, d, revision); why != "" {
				return p.fail(ctx, ev, why)
			}
		}
		if changed := upgrade.ChangedImages(pod, sb.Spec.Template); upgrade.ChecksPoint(sb, d.Attempt) && len(changed) > 0 &&
			!upgrade.BuiltByResumed(pod, sb, d.Attempt, d.ResumedAttempt) {
			return p.failDirectCheckpoint(ctx, ev, changed)
		}
		for _, pin := range []func(context.Context, *agentsv1alpha1.Sandbox, string) (string, error){p.pinDirectHooks, p.pinDirectCheckpointRestore} {
			written, err := pin(ctx, sb, d.Attempt)
			if refused := (*pinRefused)(nil); errors.As(err, &refused) {
				return p.fail(ctx, ev, refused.message(sb))
			}
			if err != nil {
				return err
			}
			if written != "" {
				version = written
			}
		}
	}
	revision, err := upgrade.Revision(target)
	if err != nil {
		return events.Permanent(fmt.Errorf("revision of patched template of %s: %w", ev.SandboxKey(), err))
	}
	stage := ""
	if d.ResumedReason != "" {
		failed := upgrade.ResumedChain(sb, d.Attempt)
		if len(failed) == 0 {
			failed = []string{d.ResumedAttempt} // recorded before the chain was kept
		}
		stage = upgrade.ResumeAt(d.ResumedReason, failed, pod, revision)
		logger.Info("resuming a failed attempt", "failedAttempt", d.ResumedAttempt, "failedReason", d.ResumedReason, "from", stage)
	}
	if stage == agentsv1alpha1.UpgradingReasonPostUpgrade {
		return p.publish(ctx, ev, events.TypePodReady, func(out *events.Data) {
			out.Stage = agentsv1alpha1.UpgradingReasonUpgradePod
			out.TargetRevision = revision
			out.NewPodUID = pod.UID
			out.SandboxResourceVersion = version
		})
	}
	return p.publish(ctx, ev, events.TypePatched, func(out *events.Data) {
		out.Stage = stage
		out.Checkpoint = checkpoints
		out.TargetRevision = revision
		out.SandboxResourceVersion = version
		if pod != nil {
			out.OldPodUID = pod.UID
		}
	})
}

// writeSpec writes template and lifecycle if they differ, and for a
// CheckpointRestore attempt its strategy (upgrade.AnnotationUpgradeStrategy),
// and, for an attempt that resumes none (fresh) and changes the template,
// the template it replaces (upgrade.AnnotationOriginalTemplate, kept for
// this attempt: until preUpgrade has backed up the pod that runs it, a pod
// made outside UpgradePod is built from it), in one JSON patch that holds
// only if the spec is still the one read (a test of metadata.generation,
// which status and label writes do not move, so they never make it
// conflict). spec.upgradePolicy is not written: an ops does not need it,
// and a policy left behind would make a later template edit recreate the pod
// by surprise; one the user set stays as it is.
//
// It returns the written sandbox's resourceVersion ("" when nothing was
// written); or, when the API server refuses the write for good
// (upgrade.Refusal: an admission policy or webhook, RBAC, validation) while
// the sandbox is still as read (stillAsRead), the server's words, for the
// caller to fail the attempt with at once instead of waiting for
// redeliveries that get the same answer. Any other error is returned for a
// redelivery, which reads the sandbox again: a failed test of the patch (the
// sandbox changed, was released or recreated since read) is Invalid too, and
// is told apart by reading the sandbox again.
func (p *Patcher) writeSpec(ctx context.Context, sb *agentsv1alpha1.Sandbox, ops *agentsv1alpha1.SandboxUpdateOps, target *corev1.PodTemplateSpec, checkpoint bool, attempt string, fresh bool) (written, refused string, stored *corev1.PodTemplateSpec, err error) {
	strategyOK := !checkpoint || sb.Annotations[upgrade.AnnotationUpgradeStrategy] == upgrade.StrategyValue(attempt)
	sameTemplate := equality.Semantic.DeepEqual(sb.Spec.Template, target)
	pinned := upgrade.HooksPinned(sb, attempt, ops.Spec.Lifecycle)
	if strategyOK && sameTemplate && pinned && equality.Semantic.DeepEqual(sb.Spec.Lifecycle, ops.Spec.Lifecycle) {
		klog.FromContext(ctx).V(1).Info("skip write: spec already patched")
		return "", "", nil, nil
	}
	original := ""
	if fresh && !sameTemplate && sb.Annotations[upgrade.AnnotationOriginalTemplateFor] != attempt {
		value, ok := upgrade.OriginalTemplateValue(sb.Spec.Template)
		if !ok {
			klog.FromContext(ctx).Info("The template is too large to keep a copy of: until preUpgrade succeeds, a pod made for the sandbox outside the upgrade (an unpause, a wake-up to resume) is built from the patched template", "limit", upgrade.MaxOriginalTemplate)
		}
		original = value
	}
	body, err := specPatch(sb, target, ops.Spec.Lifecycle, checkpoint, attempt, original)
	if err != nil {
		return "", "", nil, events.Permanent(fmt.Errorf("encode spec patch of sandbox %s/%s: %w", sb.Namespace, sb.Name, err))
	}
	out, err := p.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.JSONPatchType, body, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return "", "", nil, fmt.Errorf("patch sandbox %s/%s spec: the sandbox is gone, will look again: %w", sb.Namespace, sb.Name, err)
	}
	if words := upgrade.Refusal(err); words != "" {
		same, changed, rerr := p.stillAsRead(ctx, sb, ops.Name, attempt)
		if rerr != nil {
			return "", "", nil, fmt.Errorf("patch sandbox %s/%s spec (generation %d): %w; then %w", sb.Namespace, sb.Name, sb.Generation, err, rerr)
		}
		if same {
			klog.FromContext(ctx).Info("The API server refused the spec write", "err", err)
			return "", words, nil, nil
		}
		// The patch's tests failed (or the refusal met a sandbox that has
		// moved on): the retry reads the sandbox again and skips it, or
		// patches it as it is now.
		return "", "", nil, fmt.Errorf("patch sandbox %s/%s spec (generation %d): the sandbox changed since read (%s): %w", sb.Namespace, sb.Name, sb.Generation, changed, err)
	}
	if err != nil {
		return "", "", nil, fmt.Errorf("patch sandbox %s/%s spec (generation %d): %w", sb.Namespace, sb.Name, sb.Generation, err)
	}
	klog.FromContext(ctx).V(1).Info("spec patched", "resourceVersion", out.ResourceVersion)
	return out.ResourceVersion, "", out.Spec.Template, nil
}

// stillAsRead reads the sandbox again, from etcd, and reports whether it is
// still what specPatch tested read as: the same UID, not being deleted, the
// spec at the same generation, and claimed as read by attempt of the ops
// named opsName (its ops label and claim annotation). When it is, a refusal
// of the spec write was the API server's answer to the write itself, not a
// failed test: generation only grows and a claim names the ops's UID, so a
// sandbox that changed and changed back cannot pass for one that did not.
// The same holds for a refusal that is not Invalid (RBAC answers before the
// tests are run): an attempt whose ops was deleted meanwhile is skipped by
// the retry, not failed. changed says, for the log, what differs.
func (p *Patcher) stillAsRead(ctx context.Context, sb *agentsv1alpha1.Sandbox, opsName, attempt string) (same bool, changed string, err error) {
	now, err := p.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Get(ctx, sb.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, "it is gone", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("get sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	claim, claimed := sb.Annotations[upgrade.AnnotationClaim]
	nowClaim, nowClaimed := now.Annotations[upgrade.AnnotationClaim]
	switch {
	case now.UID != sb.UID:
		return false, "another sandbox of that name was created", nil
	case now.DeletionTimestamp != nil:
		return false, "it is being deleted", nil
	case now.Generation != sb.Generation:
		return false, fmt.Sprintf("its spec is at generation %d, read at %d", now.Generation, sb.Generation), nil
	case now.Labels[agentsv1alpha1.LabelUpdateOps] != sb.Labels[agentsv1alpha1.LabelUpdateOps] || nowClaim != claim || nowClaimed != claimed ||
		!upgrade.ClaimedBy(now, opsName, attempt):
		return false, fmt.Sprintf("it is claimed by %q (%q), read as %q (%q)", now.Labels[agentsv1alpha1.LabelUpdateOps], nowClaim, sb.Labels[agentsv1alpha1.LabelUpdateOps], claim), nil
	}
	return true, "", nil
}

// currentPod reads sb's pod from the API server (nil when it has none).
func (p *Patcher) currentPod(ctx context.Context, sb *agentsv1alpha1.Sandbox) (*corev1.Pod, error) {
	pod, err := p.kube.CoreV1().Pods(sb.Namespace).Get(ctx, sb.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	return pod, nil
}

// opsOf returns the ops d names; gone when it is not there (or another ops
// has its name now). The cache may be behind: an ops just created, or
// created again under a deleted one's name (the way to resume), is read live.
func (p *Patcher) opsOf(ctx context.Context, d events.Data) (ops *agentsv1alpha1.SandboxUpdateOps, gone bool, err error) {
	ops, err = p.ops.SandboxUpdateOps(d.Sandbox.Namespace).Get(d.Ops.Name)
	if apierrors.IsNotFound(err) || (err == nil && ops.UID != d.Ops.UID) {
		ops, err = p.agents.AgentsV1alpha1().SandboxUpdateOps(d.Sandbox.Namespace).Get(ctx, d.Ops.Name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) || (err == nil && ops.UID != d.Ops.UID) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("get SandboxUpdateOps %s/%s: %w", d.Sandbox.Namespace, d.Ops.Name, err)
	}
	return ops, false, nil
}

// unusableTemplate says why sb's spec.template cannot be patched, naming the
// ops (opsName), or "" when it can: there is none (spec.templateRef alone), or
// it cannot be read.
func unusableTemplate(sb *agentsv1alpha1.Sandbox, opsName string) string {
	if sb.Spec.Template == nil && sb.Spec.TemplateProblem() == "" {
		return fmt.Sprintf("sandbox %s: %s, then create a new SandboxUpdateOps; SandboxUpdateOps %s was not applied to it, and nothing was changed", sb.Name, agentsv1alpha1.NoTemplateProblem, opsName)
	}
	if why := sb.Spec.TemplateProblem(); why != "" {
		return fmt.Sprintf("sandbox %s: %s; SandboxUpdateOps %s was not applied to it, and its pod was not touched: fix the sandbox's spec.template, then create a new SandboxUpdateOps", sb.Name, why, opsName)
	}
	return ""
}

// fail files a failure of the patch under PreUpgrade, the stage the patch is
// written in, so a new attempt resumes before the backup.
func (p *Patcher) fail(ctx context.Context, in events.Event, message string) error {
	klog.FromContext(ctx).Info("sandbox failed", "message", message)
	return p.publish(ctx, in, events.TypeFailed, func(out *events.Data) {
		out.Stage = agentsv1alpha1.UpgradingReasonPreUpgrade
		out.Reason = agentsv1alpha1.UpgradingReasonPreUpgradeFailed
		out.Message = agentsv1alpha1.TruncateConditionMessage(message)
	})
}

// failCheckpoint refuses a CheckpointRestore that changes an image (API.md;
// CEL refuses it at apply, this is the last line): a checkpoint cannot be
// restored onto a new image.
func (p *Patcher) failCheckpoint(ctx context.Context, in events.Event, ops *agentsv1alpha1.SandboxUpdateOps) error {
	msg := fmt.Sprintf("SandboxUpdateOps %s changes a container image under CheckpointRestore, which cannot restore a checkpoint onto a new image; the sandbox was not changed: use updateStrategy.type Recreate", ops.Name)
	klog.FromContext(ctx).Info("sandbox failed", "message", msg)
	return p.publish(ctx, in, events.TypeFailed, func(out *events.Data) {
		out.Stage = agentsv1alpha1.UpgradingReasonCheckpointing
		out.Reason = agentsv1alpha1.UpgradingReasonCheckpointFailed
		out.Message = msg
	})
}

// failDirectCheckpoint refuses a direct CheckpointRestore attempt whose
// template changes an image (the same rule as an ops's patch, which CEL
// refuses at apply): nothing was checkpointed, patched or deleted.
func (p *Patcher) failDirectCheckpoint(ctx context.Context, in events.Event, changed []string) error {
	msg := agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("the template changes an image (%s) under spec.upgradePolicy.type CheckpointRestore, which cannot restore a checkpoint onto a new image; nothing was changed and the pod keeps running: set spec.upgradePolicy.type Recreate (with preUpgrade/postUpgrade hooks to keep the workspace) for this change, or put the image back",
		strings.Join(changed, ", ")))
	klog.FromContext(ctx).Info("sandbox failed", "message", msg)
	return p.publish(ctx, in, events.TypeFailed, func(out *events.Data) {
		out.Stage = agentsv1alpha1.UpgradingReasonCheckpointing
		out.Reason = agentsv1alpha1.UpgradingReasonCheckpointFailed
		out.Message = msg
	})
}

func (p *Patcher) publish(ctx context.Context, in events.Event, typ string, fill func(*events.Data)) error {
	out := events.Event{Type: typ, Data: events.Data{Ops: in.Data.Ops, Sandbox: in.Data.Sandbox, Attempt: in.Data.Attempt,
		ResumedAttempt: in.Data.ResumedAttempt, ResumedReason: in.Data.ResumedReason, Redrive: in.Data.Redrive}}
	fill(&out.Data)
	if err := p.publisher.Publish(ctx, out); err != nil {
		return fmt.Errorf("publish %s for %s: %w", typ, in.SandboxKey(), err)
	}
	return nil
}

// specPatch is the JSON patch of writeSpec: tests that the spec is still at
// the generation read and that the sandbox is still claimed as read (the
// ops's label, and its claim annotation when it has one: an ops deleted
// meanwhile releases the sandbox, and a template patched after that would
// never be rolled out, while a later ops with the same patch would find
// nothing to do), then the template, the lifecycle (fixed for attempt in
// upgrade.AnnotationAttemptHooks, and, in
// upgrade.AnnotationOwnLifecycle, the sandbox's own, which the selector puts
// back once the ops is done with it), and, for a
// CheckpointRestore attempt, the strategy annotation, and, when original is
// not empty, the template replaced (upgrade.AnnotationOriginalTemplate, for
// attempt).
func specPatch(sb *agentsv1alpha1.Sandbox, target *corev1.PodTemplateSpec, lifecycle *agentsv1alpha1.SandboxLifecycle, checkpoint bool, attempt, original string) ([]byte, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	ops := []op{
		{Op: "test", Path: "/metadata/uid", Value: sb.UID}, // not a sandbox of the same name created since
		{Op: "test", Path: "/metadata/generation", Value: sb.Generation},
		{Op: "test", Path: "/metadata/labels/" + upgrade.PointerToken(agentsv1alpha1.LabelUpdateOps), Value: sb.Labels[agentsv1alpha1.LabelUpdateOps]},
	}
	if claim, ok := sb.Annotations[upgrade.AnnotationClaim]; ok {
		ops = append(ops, op{Op: "test", Path: "/metadata/annotations/" + upgrade.PointerToken(upgrade.AnnotationClaim), Value: claim})
	}
	ops = append(ops, op{Op: "add", Path: "/spec/template", Value: target})
	switch {
	case lifecycle != nil:
		ops = append(ops, op{Op: "add", Path: "/spec/lifecycle", Value: lifecycle})
	case sb.Spec.Lifecycle != nil:
		ops = append(ops, op{Op: "remove", Path: "/spec/lifecycle"})
	}
	keep := upgrade.KeepOwnLifecycle(sb, lifecycle)
	if sb.Annotations == nil {
		ops = append(ops, op{Op: "add", Path: "/metadata/annotations", Value: map[string]string{}})
	}
	ops = append(ops, op{Op: "add", Path: "/metadata/annotations/" + upgrade.PointerToken(upgrade.AnnotationAttemptHooks), Value: upgrade.OpsAttemptHooksValue(sb, attempt, lifecycle)})
	if keep != "" {
		ops = append(ops, op{Op: "add", Path: "/metadata/annotations/" + upgrade.PointerToken(upgrade.AnnotationOwnLifecycle), Value: keep})
	}
	if checkpoint {
		ops = append(ops, op{Op: "add", Path: "/metadata/annotations/" + upgrade.PointerToken(upgrade.AnnotationUpgradeStrategy), Value: upgrade.StrategyValue(attempt)})
	}
	if original != "" {
		ops = append(ops,
			op{Op: "add", Path: "/metadata/annotations/" + upgrade.PointerToken(upgrade.AnnotationOriginalTemplate), Value: original},
			op{Op: "add", Path: "/metadata/annotations/" + upgrade.PointerToken(upgrade.AnnotationOriginalTemplateFor), Value: attempt})
	}
	return json.Marshal(ops)
}

// noPodToBackUp is the PreUpgrade failure of a fresh attempt whose sandbox has
// no pod while its ops has a preUpgrade hook: deleted, or stopped, as the
// attempt began (or since, for a re-drive). Going on would skip the backup and
// let postUpgrade restore an older one over what the sandbox keeps on its
// volumes. The pod comes back from the template the sandbox ran before the
// patch, and the resume backs it up.
// A resume of a failure before the backup (resume) is told apart: its pod may
// not come back by itself (a quota or a policy refusing it).
func noPodToBackUp(sb *agentsv1alpha1.Sandbox, ops *agentsv1alpha1.SandboxUpdateOps, resume bool) string {
	if resume {
		return fmt.Sprintf("sandbox %s/%s has no pod, and the upgrade this one resumes failed before its backup, so preUpgrade cannot back it up; its upgrade was not carried on (going on would let postUpgrade restore an older backup over what its volumes hold). Once it has a pod again (kubectl describe sbx %s -n %s says why it has none), resume it: `kubectl molt retry %s -n %s` once this ops has ended, or a new SandboxUpdateOps",
			sb.Namespace, sb.Name, sb.Name, sb.Namespace, ops.Name, sb.Namespace)
	}
	return fmt.Sprintf("sandbox %s/%s has no pod (it was deleted or stopped as its upgrade began), so preUpgrade cannot back it up; its upgrade was not carried on (going on would let postUpgrade restore an older backup over what its volumes hold). Its pod comes back by itself (a paused sandbox's when the resume wakes it), from the template it ran before SandboxUpdateOps %s's patch; then resume it from PreUpgrade: `kubectl molt retry %s -n %s` once this ops has ended, or a new SandboxUpdateOps",
		sb.Namespace, sb.Name, ops.Name, ops.Name, sb.Namespace)
}
