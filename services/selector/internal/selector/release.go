package selector

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// releaseRecheck is how often a deleted ops whose sandboxes still finish
// their attempt is looked at again (their status changes requeue it too).
const releaseRecheck = 2 * time.Second

// ensureFinalizer adds the protection finalizer to ops if it is missing, so
// the ops cannot vanish before its labels are removed.
func (s *Selector) ensureFinalizer(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps) error {
	if slices.Contains(ops.Finalizers, agentsv1alpha1.FinalizerSandboxUpdateOpsProtection) {
		return nil
	}
	finalizers := append(slices.Clone(ops.Finalizers), agentsv1alpha1.FinalizerSandboxUpdateOpsProtection)
	if err := s.patchFinalizers(ctx, ops, finalizers); err != nil {
		return fmt.Errorf("add finalizer to ops %s/%s: %w", ops.Namespace, ops.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Added finalizer")
	return nil
}

// release runs when ops is being deleted. Deleting an ops strands nothing:
//  1. list the sandboxes it claimed from the API server, not the cache, so a
//     label written just before the delete is not missed, and from the cache
//     those whose label was removed while its claim annotation stayed;
//  2. a sandbox whose attempt is in a stage keeps its label, so every stage
//     goes on driving it to Succeeded or a failed reason (the watchdog bounds
//     how long); so does one whose template the patcher already patched
//     before statusagg recorded the attempt; the ops is looked at again
//     shortly;
//  3. every other one loses the ops label and the resume-trigger annotation,
//     each patch carrying the listed resourceVersion, so a sandbox whose
//     status moved meanwhile (or that another ops claimed) is not stripped
//     (conflict → requeue). A failed one stays failed: a new ops resumes it;
//  4. once none is left, the finalizer goes and the delete completes.
func (s *Selector) release(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps) error {
	logger := klog.FromContext(ctx)
	if !slices.Contains(ops.Finalizers, agentsv1alpha1.FinalizerSandboxUpdateOpsProtection) {
		logger.V(4).Info("Skip: ops is being deleted and already released")
		return nil
	}
	list := &agentsv1alpha1.SandboxList{}
	// A name longer than a label value (refused at create by the CRD since;
	// an ops created before could exist) never labelled a sandbox: the
	// claim patch was Invalid. Listing by it would be refused forever and
	// the ops would stay Terminating.
	if errs := validation.IsValidLabelValue(ops.Name); len(errs) == 0 {
		claimed := labels.Set{agentsv1alpha1.LabelUpdateOps: ops.Name}.String()
		var err error
		if list, err = s.client.AgentsV1alpha1().Sandboxes(ops.Namespace).List(ctx, metav1.ListOptions{LabelSelector: claimed}); err != nil {
			return fmt.Errorf("list sandboxes claimed by ops %s/%s: %w", ops.Namespace, ops.Name, err)
		}
	}
	sandboxes := make([]*agentsv1alpha1.Sandbox, 0, len(list.Items))
	for i := range list.Items {
		sandboxes = append(sandboxes, &list.Items[i])
	}
	// Claimed sandboxes whose label was removed (upgrade.UnlabelledClaim): the
	// label selector misses them, and one still in a stage would be left
	// driving an attempt of an ops that is gone, outside every budget. They
	// are rare: the cache is enough (a stale copy conflicts below).
	unlabelled, err := s.sandboxLister.Sandboxes(ops.Namespace).List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list sandboxes of namespace %s for ops %s: %w", ops.Namespace, ops.Name, err)
	}
	for _, sb := range unlabelled {
		if _, ok := upgrade.UnlabelledClaim(sb, ops.Name, ops.UID); ok {
			sandboxes = append(sandboxes, sb.DeepCopy())
		}
	}
	// One in a stage gets its label back, as for an ops not deleted: every
	// stage then drives it to its end (podcycler reports its new pod), and
	// the release below takes the label off once the attempt ended.
	if err := s.relabel(ctx, ops, sandboxes); err != nil {
		return err
	}
	finishing := 0
	for _, sb := range sandboxes {
		if sb.DeletionTimestamp != nil {
			// Going away: nothing drives its stage any more (the watchdog and
			// podcycler leave a sandbox being deleted alone), and one held by
			// a finalizer elsewhere must not hold this ops, and so its
			// namespace, for as long.
			continue
		}
		if upgrade.DeletionWaitsFor(ops, sb) {
			finishing++
			if _, recorded := upgrade.ReasonFor(sb, string(ops.UID)); !recorded {
				// Patched, not recorded yet: requested is sent again in case it
				// was lost (once recorded, the watchdog bounds the attempt).
				if _, err := s.requestAgain(ctx, ops, sb); err != nil {
					return err
				}
			}
			continue
		}
		patch := metaPatch{Metadata: metaFields{
			ResourceVersion: sb.ResourceVersion,
			Labels:          map[string]*string{agentsv1alpha1.LabelUpdateOps: nil},
		}}
		if upgrade.StateFor(sb, ops.Name, ops.UID) == upgrade.Failed && sb.Labels[agentsv1alpha1.LabelUpgradeFailed] != "true" {
			// It failed while the ops was being deleted, before
			// syncFailedLabels marked it: marked here, or a retry ops
			// selecting upgrade-failed=true would never find it.
			patch.Metadata.Labels[agentsv1alpha1.LabelUpgradeFailed] = ptr("true")
		}
		for _, mark := range []string{agentsv1alpha1.AnnotationUpgradeResumeTrigger, upgrade.AnnotationClaim} {
			if _, ok := sb.Annotations[mark]; ok {
				if patch.Metadata.Annotations == nil {
					patch.Metadata.Annotations = map[string]*string{}
				}
				patch.Metadata.Annotations[mark] = nil
			}
		}
		_, err := s.client.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{})
		if apierrors.IsConflict(err) {
			return fmt.Errorf("release sandbox %s/%s from ops %s: it changed since listed, will look again: %w", sb.Namespace, sb.Name, ops.Name, err)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("release sandbox %s/%s from ops %s: %w", sb.Namespace, sb.Name, ops.Name, err)
		}
		logger.V(2).Info("Released sandbox", "sandbox", klog.KObj(sb))
	}
	if finishing > 0 {
		logger.Info("Ops is being deleted: waiting for its sandboxes to finish their attempt", "finishing", finishing)
		s.enqueueAfter(ops.Namespace+"/"+ops.Name, releaseRecheck)
		return nil
	}
	s.inflight.forgetAttempt(string(ops.UID))

	finalizers := slices.DeleteFunc(slices.Clone(ops.Finalizers), func(f string) bool {
		return f == agentsv1alpha1.FinalizerSandboxUpdateOpsProtection
	})
	if err := s.patchFinalizers(ctx, ops, finalizers); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer from ops %s/%s: %w", ops.Namespace, ops.Name, err)
	}
	logger.Info("Released ops", "sandboxes", len(sandboxes))
	return nil
}

// patchFinalizers replaces ops' finalizers, against the resourceVersion read.
func (s *Selector) patchFinalizers(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, finalizers []string) error {
	if finalizers == nil {
		finalizers = []string{}
	}
	patch := metaPatch{Metadata: metaFields{ResourceVersion: ops.ResourceVersion, Finalizers: &finalizers}}
	_, err := s.client.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).Patch(ctx, ops.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{})
	return err
}
