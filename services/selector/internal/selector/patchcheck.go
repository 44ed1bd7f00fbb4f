package selector

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// checkPatch decides, before the ops admits its first sandbox, whether its patch can work
// at all, and records the verdict in the ops's upgrade.AnnotationPatchCheck (once: the
// patch is immutable). It returns the problem ("" when the patch passed). In order:
//
//  1. the patch applies to an empty pod template (strategic merge, no unknown field): if
//     not, it cannot work on any sandbox;
//  2. for the first candidate, the patched template must make a pod the API server accepts
//     (server-side dry run) whenever the unpatched one does: if the patch alone turns an
//     acceptable pod into a refused one, it is the patch's fault.
//
// A problem that depends on one sandbox's own template (the patch does not apply to it, or
// its pod is refused with or without the patch) is left to that sandbox's upgrade, which
// fails it alone before its pod is touched.
func (s *Selector) checkPatch(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, first *agentsv1alpha1.Sandbox) (string, error) {
	if _, ok := ops.Annotations[upgrade.AnnotationPatchCheck]; ok {
		return upgrade.PatchProblem(ops), nil
	}
	problem, err := s.patchProblem(ctx, ops, first)
	if err != nil {
		return "", err
	}
	value := upgrade.PatchCheckOK
	if problem != "" {
		value = problem
	}
	patch := metaPatch{Metadata: metaFields{Annotations: map[string]*string{upgrade.AnnotationPatchCheck: &value}}}
	if _, err := s.client.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).Patch(ctx, ops.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{}); err != nil {
		return "", fmt.Errorf("record the patch check on ops %s/%s: %w", ops.Namespace, ops.Name, err)
	}
	if problem != "" {
		klog.FromContext(ctx).Info("Refused the ops: its patch cannot work; no sandbox was touched", "problem", problem)
	}
	return problem, nil
}

func (s *Selector) patchProblem(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, first *agentsv1alpha1.Sandbox) (string, error) {
	raw := ops.Spec.Patch.Raw
	if _, err := upgrade.ApplyPatch(&corev1.PodTemplateSpec{}, raw); err != nil {
		return fmt.Sprintf("spec.patch cannot be applied to a pod template: %v; no sandbox was touched: delete this SandboxUpdateOps and create one with a valid spec.patch", err), nil
	}
	if first == nil || first.Spec.Template == nil {
		return "", nil
	}
	patched, err := upgrade.ApplyPatch(first.Spec.Template, raw)
	if err != nil {
		return "", nil // this sandbox's own template: its upgrade fails it alone
	}
	refusedPatched, err := upgrade.DryRunCreatePod(ctx, s.kube, upgrade.PodFrom(first.Namespace, first.Name, patched))
	if err != nil || refusedPatched == "" {
		return "", err
	}
	refusedOriginal, err := upgrade.DryRunCreatePod(ctx, s.kube, upgrade.PodFrom(first.Namespace, first.Name, first.Spec.Template))
	if err != nil || refusedOriginal != "" {
		return "", err // refused without the patch too: the sandbox's own problem
	}
	return fmt.Sprintf("spec.patch makes a pod the API server refuses (checked on sandbox %s): %s; no sandbox was touched: delete this SandboxUpdateOps and create one with a valid spec.patch", first.Name, refusedPatched), nil
}
