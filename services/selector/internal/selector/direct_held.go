package selector

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	listers "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// prepare is the metadata patch that readies sb for the direct attempt
// next, against the resourceVersion read (ok false when nothing needs
// writing): it removes a finished ops's label, the upgrade-failed mark (the
// sandbox is being upgraded again; the label marks what an ops failed) and
// a held record, and, when next continues the failed attempt failed,
// records that (upgrade.AnnotationResumes) with the chain behind it. A
// record of next written before (a crash before `requested`, a retry after
// a Conflict) is kept as it is: rebuilt from itself it would name next
// among the attempts next continues.
func prepare(sb *agentsv1alpha1.Sandbox, next, failed, failedReason string, resumes bool) (metaPatch, bool) {
	patch := metaPatch{Metadata: metaFields{ResourceVersion: sb.ResourceVersion}}
	for _, label := range []string{agentsv1alpha1.LabelUpdateOps, agentsv1alpha1.LabelUpgradeFailed} {
		if _, ok := sb.Labels[label]; ok {
			if patch.Metadata.Labels == nil {
				patch.Metadata.Labels = map[string]*string{}
			}
			patch.Metadata.Labels[label] = nil
		}
	}
	annotations := map[string]*string{}
	if _, ok := sb.Annotations[upgrade.AnnotationDirectHeld]; ok {
		annotations[upgrade.AnnotationDirectHeld] = nil
	}
	if _, _, recorded := upgrade.Resumes(sb, next); resumes && !recorded {
		annotations[upgrade.AnnotationResumes] = ptr(upgrade.ResumesValue(next, failed, failedReason, upgrade.ChainBehind(sb, failed)...))
	}
	if len(annotations) > 0 {
		patch.Metadata.Annotations = annotations
	}
	return patch, patch.Metadata.Labels != nil || patch.Metadata.Annotations != nil
}

// opsResumeProblem says why the failed ops attempt failed of sb (failed
// with failedReason) must not be continued by a direct attempt to revision
// from pod, "" when it may. A direct attempt continues it as a new ops
// would (upgrade.ResumeAt), with the sandbox's spec.upgradePolicy.type as
// its strategy; that is unsafe in one case: the failed attempt was a
// CheckpointRestore that got past its original pod (the workspace is kept
// only in its checkpoint) and the policy is Recreate, which would build the
// new pod from an empty filesystem and leave the checkpoint unused. The
// other way round (Recreate failed, the policy CheckpointRestore) loses
// nothing: with no checkpoint to restore and no original pod to take one
// from, podcycler fails the attempt in Checkpointing and touches nothing.
func opsResumeProblem(sb *agentsv1alpha1.Sandbox, pod *corev1.Pod, failed, failedReason, revision string) string {
	chain := append([]string{failed}, upgrade.ChainBehind(sb, failed)...)
	if upgrade.ResumeAt(failedReason, chain, pod, revision) == agentsv1alpha1.UpgradingReasonPreUpgrade {
		return "" // the original pod is there: backed up again, whatever the strategy
	}
	policy := sb.Spec.UpgradePolicy.Type
	if !upgrade.ChecksPoint(sb, failed) || policy == agentsv1alpha1.UpgradeTypeCheckpointRestore {
		return ""
	}
	return fmt.Sprintf("the failed upgrade was a CheckpointRestore that already replaced the original pod, so the workspace is kept only in its checkpoint "+
		"(kubectl get cp -n %s -l %s=%s), and spec.upgradePolicy.type %s would start the new pod from an empty filesystem: "+
		"set spec.upgradePolicy.type to CheckpointRestore (kubectl patch sbx %s -n %s --type merge -p '{\"spec\":{\"upgradePolicy\":{\"type\":\"CheckpointRestore\"}}}'), "+
		"or create a SandboxUpdateOps of updateStrategy.type CheckpointRestore that selects this sandbox; either continues from the failed step and restores the checkpoint",
		sb.Namespace, upgrade.LabelCheckpointSandbox, upgrade.CheckpointSandboxLabel(sb.Name), policyName(policy), sb.Name, sb.Namespace)
}

// policyName is how a message names an upgradePolicy type (its default,
// Recreate, when empty).
func policyName(t agentsv1alpha1.UpgradeType) string {
	if t == "" {
		return string(agentsv1alpha1.UpgradeTypeRecreate)
	}
	return string(t)
}

// heldMessage is the record of an edit of sb that is not rolled out
// directly: which edit, which failure it came after, then why and what to
// do.
func heldMessage(sb *agentsv1alpha1.Sandbox, why string) string {
	failed := upgrade.CurrentAttempt(sb)
	reason, _ := upgrade.ReasonFor(sb, failed)
	by := "a SandboxUpdateOps (attempt " + failed + ")"
	if name := failedOpsName(sb, failed); name != "" {
		by = "SandboxUpdateOps " + name + " (attempt " + failed + ")"
	}
	return fmt.Sprintf("the spec was changed (generation %d) after the upgrade by %s failed with %s, and the change is not rolled out directly (spec.upgradePolicy): %s",
		sb.Generation, by, reason, why)
}

// failedOpsName is the name of the ops whose attempt failed is, as the
// sandbox still says it: its claim, else its ops label ("" once released).
func failedOpsName(sb *agentsv1alpha1.Sandbox, failed string) string {
	if f := strings.Fields(sb.Annotations[upgrade.AnnotationClaim]); len(f) == 2 && f[1] == failed {
		return f[0]
	}
	return sb.Labels[agentsv1alpha1.LabelUpdateOps]
}

// hold records on sb why its edit is not rolled out directly
// (upgrade.AnnotationDirectHeld), once per generation and message, against
// the resourceVersion read: an edit made meanwhile is looked at again
// (Conflict → retry), not covered by a verdict on the one before.
func (d *direct) hold(ctx context.Context, sb *agentsv1alpha1.Sandbox, why string) error {
	value := upgrade.DirectHeldValue(sb.Generation, why)
	if sb.Annotations[upgrade.AnnotationDirectHeld] == value {
		return nil
	}
	patch := metaPatch{Metadata: metaFields{ResourceVersion: sb.ResourceVersion, Annotations: map[string]*string{upgrade.AnnotationDirectHeld: &value}}}
	_, err := d.client.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record on sandbox %s/%s why its edit is not rolled out: %w", sb.Namespace, sb.Name, err)
	}
	klog.FromContext(ctx).Info("Edit of a sandbox an ops left failed is not rolled out directly", "sandbox", klog.KObj(sb), "generation", sb.Generation, "why", why)
	return nil
}

// opsEndedHandler enqueues the sandboxes an ops claims, with
// spec.upgradePolicy, when it ends (Completed or Failed): one the ops left
// failed and whose spec the user edited meanwhile is continued now (the ops
// drove it until then). Nothing else about an ops concerns the direct path;
// a deleted ops releases its sandboxes, and that write enqueues them.
func opsEndedHandler(sandboxes listers.SandboxLister, enqueue func(string)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{UpdateFunc: func(oldObj, obj any) {
		old, ok1 := oldObj.(*agentsv1alpha1.SandboxUpdateOps)
		ops, ok2 := obj.(*agentsv1alpha1.SandboxUpdateOps)
		if !ok1 || !ok2 || upgrade.IsFinished(old) || !upgrade.IsFinished(ops) {
			return
		}
		claimed, err := labels.ValidatedSelectorFromSet(labels.Set{agentsv1alpha1.LabelUpdateOps: ops.Name})
		if err != nil {
			return // a name longer than a label value never claimed a sandbox
		}
		list, err := sandboxes.Sandboxes(ops.Namespace).List(claimed)
		if err != nil {
			return
		}
		for _, sb := range list {
			if sb.Spec.UpgradePolicy != nil {
				enqueue(sb.Namespace + "/" + sb.Name)
			}
		}
	}}
}
