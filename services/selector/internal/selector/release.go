package selector

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

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

// release runs when ops is being deleted: it removes the ops label and the
// resume-trigger annotation from every sandbox the ops claimed, then the
// finalizer. The claimed sandboxes are listed from the API server, not the
// cache, so a label written just before the delete is not missed; each
// patch carries the listed resourceVersion, so a sandbox claimed meanwhile
// by another ops is not stripped (conflict → requeue). Sandboxes mid-upgrade
// keep their status: they finish or stay failed visibly.
func (s *Selector) release(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps) error {
	logger := klog.FromContext(ctx)
	if !slices.Contains(ops.Finalizers, agentsv1alpha1.FinalizerSandboxUpdateOpsProtection) {
		logger.V(4).Info("Skip: ops is being deleted and already released")
		return nil
	}
	claimed := labels.Set{agentsv1alpha1.LabelUpdateOps: ops.Name}.String()
	list, err := s.client.AgentsV1alpha1().Sandboxes(ops.Namespace).List(ctx, metav1.ListOptions{LabelSelector: claimed})
	if err != nil {
		return fmt.Errorf("list sandboxes claimed by ops %s/%s: %w", ops.Namespace, ops.Name, err)
	}
	for i := range list.Items {
		sb := &list.Items[i]
		patch := metaPatch{Metadata: metaFields{
			ResourceVersion: sb.ResourceVersion,
			Labels:          map[string]*string{agentsv1alpha1.LabelUpdateOps: nil},
		}}
		if _, ok := sb.Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger]; ok {
			patch.Metadata.Annotations = map[string]*string{agentsv1alpha1.AnnotationUpgradeResumeTrigger: nil}
		}
		_, err := s.client.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("release sandbox %s/%s from ops %s: %w", sb.Namespace, sb.Name, ops.Name, err)
		}
		logger.V(2).Info("Released sandbox", "sandbox", klog.KObj(sb))
	}
	s.inflight.forgetAttempt(string(ops.UID))

	finalizers := slices.DeleteFunc(slices.Clone(ops.Finalizers), func(f string) bool {
		return f == agentsv1alpha1.FinalizerSandboxUpdateOpsProtection
	})
	if err := s.patchFinalizers(ctx, ops, finalizers); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer from ops %s/%s: %w", ops.Namespace, ops.Name, err)
	}
	logger.Info("Released ops", "sandboxes", len(list.Items))
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
