package selector

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// checkPatch decides, before the ops admits its first sandbox, whether its patch can work
// at all, and records the verdict in the ops's upgrade.AnnotationPatchCheck (once: the
// patch is immutable), with the digest of the patch it checked
// (upgrade.AnnotationPatchDigest), so a patch changed since fails the ops
// (upgrade.PatchProblem). It returns the problem ("" when the patch passed). In order:
//
//  1. the patch applies to an empty pod template (strategic merge, no unknown field): if
//     not, it cannot work on any sandbox;
//  2. for a candidate, the patched template must make a pod the API server accepts
//     (server-side dry run) whenever the unpatched one does: if the patch alone turns an
//     acceptable pod into a refused one, it is the patch's fault.
//
// A problem that depends on one sandbox's own template (the patch does not apply to it, or
// its pod is refused with or without the patch) is left to that sandbox's upgrade, which
// fails it alone before its pod is touched; the check then tries the next candidate, up to
// patchCheckTries of them, so that one unusual sandbox sorting first does not let a patch
// through unchecked.
func (s *Selector) checkPatch(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, candidates []*agentsv1alpha1.Sandbox) (string, error) {
	if _, ok := upgrade.PatchVerdict(ops); ok {
		return upgrade.PatchProblem(ops), nil
	}
	problem, err := s.decidePatch(ctx, ops, candidates)
	if err != nil {
		return "", err
	}
	return problem, s.recordPatchCheck(ctx, ops, problem)
}

// decidePatch is checkPatch's verdict on ops's patch, not recorded: why it cannot work,
// "" when it passed (or no candidate could decide).
func (s *Selector) decidePatch(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, candidates []*agentsv1alpha1.Sandbox) (string, error) {
	problem := ""
	for i, sb := range fitFirst(ops, candidates) {
		if i == patchCheckTries {
			break
		}
		var decided bool
		var err error
		if problem, decided, err = s.patchProblem(ctx, ops, sb); err != nil {
			return "", err
		}
		if decided {
			break
		}
	}
	return problem, nil
}

// recordPatchCheck records the verdict problem ("" for a pass) on ops.
func (s *Selector) recordPatchCheck(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, problem string) error {
	value := upgrade.PatchCheckOK
	if problem != "" {
		value = problem
	}
	digest, uid := upgrade.PatchDigest(ops.Spec.Patch.Raw), string(ops.UID)
	patch := metaPatch{Metadata: metaFields{Annotations: map[string]*string{
		upgrade.AnnotationPatchCheck: &value, upgrade.AnnotationPatchDigest: &digest, upgrade.AnnotationPatchCheckFor: &uid,
	}}}
	if _, err := s.client.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).Patch(ctx, ops.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("record the patch check on ops %s/%s: %w", ops.Namespace, ops.Name, err)
	}
	if problem != "" {
		klog.FromContext(ctx).Info("Refused the ops: its patch cannot work; no sandbox was touched", "problem", problem)
	}
	return nil
}

// fitFirst is candidates with the ones the patch adds a container with no image to
// (upgrade.AddedWithoutImage: their template names its containers otherwise) moved to
// the end: the patcher fails each of those alone, before anything of theirs is changed,
// so the patch is judged on a sandbox it fits while there is one. Otherwise an ops
// whose first candidates are such sandboxes (resumes of ones an earlier ops failed so
// sort first) would fail whole (InvalidPatch), and the sandboxes it fits would not be
// upgraded.
func fitFirst(ops *agentsv1alpha1.SandboxUpdateOps, candidates []*agentsv1alpha1.Sandbox) []*agentsv1alpha1.Sandbox {
	fit := make([]*agentsv1alpha1.Sandbox, 0, len(candidates))
	var bare []*agentsv1alpha1.Sandbox
	for _, sb := range candidates {
		if len(upgrade.AddedWithoutImage(sb.Spec.Template, ops.Spec.Patch.Raw)) > 0 {
			bare = append(bare, sb)
		} else {
			fit = append(fit, sb)
		}
	}
	return append(fit, bare...)
}

// patchCheckTries is how many candidates the patch check tries before it lets the patch
// pass without a verdict (each one costs up to two dry runs).
const patchCheckTries = 3

// patchProblem checks the patch on one candidate, sb. decided is false when sb's own
// template leaves the question open (no template, the patch does not apply to it for
// another reason than a list item without its merge key, or its pod is refused even
// without the patch): the next candidate is tried.
func (s *Selector) patchProblem(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sb *agentsv1alpha1.Sandbox) (problem string, decided bool, err error) {
	raw := ops.Spec.Patch.Raw
	if problem := upgrade.PatchAloneProblem(raw); problem != "" {
		return problem + "; no sandbox was touched: delete this SandboxUpdateOps and create one with a valid spec.patch", true, nil
	}
	if sb == nil || sb.Spec.Template == nil {
		return "", false, nil
	}
	patched, err := upgrade.ApplyPatch(sb.Spec.Template, raw)
	if problem := upgrade.MergeKeyProblem(sb.Name, err); problem != "" {
		return problem + "; no sandbox was touched: delete this SandboxUpdateOps and create one with a valid spec.patch", true, nil
	}
	if err != nil {
		return "", false, nil // this sandbox's own template: its upgrade fails it alone
	}
	refusedPatched, err := upgrade.DryRunCreatePod(ctx, s.kube, upgrade.PodFrom(sb.Namespace, sb.Name, patched))
	if err != nil || refusedPatched == "" {
		return "", err == nil, err
	}
	refusedOriginal, err := upgrade.DryRunCreatePod(ctx, s.kube, upgrade.PodFrom(sb.Namespace, sb.Name, sb.Spec.Template))
	if err != nil || refusedOriginal != "" {
		return "", false, err // refused without the patch too: the sandbox's own problem
	}
	next := "delete this SandboxUpdateOps and create one with a valid spec.patch"
	if upgrade.QuotaExceeded(refusedPatched) {
		// The sandbox's own pod fits: the patched one asks for more than the
		// quota has left beside it. molt never deletes a pod before its
		// replacement is known to fit (kubectl describe resourcequota).
		next = fmt.Sprintf("the patched pod must fit in the namespace's ResourceQuota beside the pod it replaces (kubectl describe resourcequota -n %s): raise the quota, or delete this SandboxUpdateOps and create one whose spec.patch asks for less", sb.Namespace)
	}
	return fmt.Sprintf("spec.patch makes a pod the API server refuses (checked on sandbox %s): %s; no sandbox was touched: %s", sb.Name, refusedPatched, next), true, nil
}
