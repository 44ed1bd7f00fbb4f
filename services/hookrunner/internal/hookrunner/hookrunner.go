package hookrunner

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	listers "molt.dev/pkg/generated/listers/agents/v1alpha1"
)

// HookRunner runs a sandbox's lifecycle hooks between the pipeline's stages.
type HookRunner struct {
	sandboxes listers.SandboxLister
	publisher *events.Publisher
}

// Handle reacts to `patched` (preUpgrade) and `pod-ready` (postUpgrade):
//  1. load the sandbox; skip if it is gone or no longer claimed by the ops;
//  2. without a hook for this step, pass the sandbox straight on;
//  3. with a hook, fail the step visibly: running hooks through the
//     agent-runtime is not built yet, and skipping a backup silently could
//     lose the user's workspace.
func (h *HookRunner) Handle(ctx context.Context, msg *events.Message) error {
	ev := msg.Event
	d := ev.Data
	var stage, next, failReason string
	switch ev.Type {
	case events.TypePatched:
		stage, next, failReason = agentsv1alpha1.UpgradingReasonPreUpgrade, events.TypePreHookDone, agentsv1alpha1.UpgradingReasonPreUpgradeFailed
	case events.TypePodReady:
		stage, next, failReason = agentsv1alpha1.UpgradingReasonPostUpgrade, events.TypePostHookDone, agentsv1alpha1.UpgradingReasonPostUpgradeFailed
	default:
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("sandbox", klog.KRef(d.Sandbox.Namespace, d.Sandbox.Name), "ops", d.Ops.Name, "attempt", d.Attempt, "stage", stage)
	ctx = klog.NewContext(ctx, logger)

	sb, err := h.sandboxes.Sandboxes(d.Sandbox.Namespace).Get(d.Sandbox.Name)
	if apierrors.IsNotFound(err) {
		logger.Info("skip: sandbox is gone")
		return nil
	}
	if err != nil {
		return fmt.Errorf("get sandbox %s: %w", ev.SandboxKey(), err)
	}
	if sb.UID != d.Sandbox.UID || sb.Labels[agentsv1alpha1.LabelUpdateOps] != d.Ops.Name {
		logger.Info("skip: sandbox is no longer claimed by this ops")
		return nil
	}

	out := events.Event{Type: next, Data: d}
	out.Data.Stage, out.Data.Reason, out.Data.Message = "", "", ""
	if hook := hookFor(sb, stage); hook != nil {
		out.Type = events.TypeFailed
		out.Data.Stage = stage
		out.Data.Reason = failReason
		out.Data.Message = "hook execution error: this molt build cannot run lifecycle hooks yet (the agent-runtime client is not built); " + notRunConsequence[stage]
	}
	if err := h.publisher.Publish(ctx, out); err != nil {
		return fmt.Errorf("publish %s for %s: %w", out.Type, ev.SandboxKey(), err)
	}
	return nil
}

func hookFor(sb *agentsv1alpha1.Sandbox, stage string) *agentsv1alpha1.UpgradeAction {
	if sb.Spec.Lifecycle == nil {
		return nil
	}
	if stage == agentsv1alpha1.UpgradingReasonPreUpgrade {
		return sb.Spec.Lifecycle.PreUpgrade
	}
	return sb.Spec.Lifecycle.PostUpgrade
}

// notRunConsequence tells the user what a hook that did not run means.
var notRunConsequence = map[string]string{
	agentsv1alpha1.UpgradingReasonPreUpgrade:  "nothing was run and the old pod is untouched: remove spec.lifecycle from the ops to upgrade without hooks",
	agentsv1alpha1.UpgradingReasonPostUpgrade: "the new pod runs but its state was not restored: restore it by hand",
}
