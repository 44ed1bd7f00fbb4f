package podcycler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// patchUndone returns UpgradePod's failure when sb's template, edited since the
// patcher wrote the ops's patch into it (the event's revision is not the
// template's), no longer carries that patch: a pod built from it would be
// counted as updated without the upgrade. "" when the edit left the patch
// whole, and for a direct attempt (its template is the latest edit), an ops
// gone or replaced (its attempt finishes on the template as it is) or an ops
// whose spec.patch changed since its check (the patch applied is not known).
// A watchdog's re-drive carries the template's revision as the watchdog saw
// it, not the patcher's, so it is always checked. The ops is read only in
// those cases, never on the happy path.
func (c *cycler) patchUndone(ctx context.Context, sb *agentsv1alpha1.Sandbox, old *corev1.Pod, d events.Data, target string) (string, error) {
	if d.Ops.Name == "" || (d.Redrive == 0 && (d.TargetRevision == "" || d.TargetRevision == target)) {
		return "", nil
	}
	ops, undone, err := c.opsPatchUndone(ctx, sb, d.Ops.Name, d.Ops.UID)
	if err != nil || undone == "" {
		return "", err
	}
	return undoneMessage(sb, ops, undone, old, d.Attempt, target), nil
}

// undoneMessage is UpgradePod's failure for sb, whose template no longer
// carries the patch of ops (undone says how), with what became of its pod
// old (nil when it has none) for attempt; target is the template's revision.
func undoneMessage(sb *agentsv1alpha1.Sandbox, ops *agentsv1alpha1.SandboxUpdateOps, undone string, old *corev1.Pod, attempt, target string) string {
	pod := "the old pod was already deleted, and the sandbox gets a pod of spec.template as it is now"
	switch {
	case old == nil || old.DeletionTimestamp != nil:
	case upgrade.BuiltBy(old, attempt) && old.Labels[agentsv1alpha1.LabelPodTemplateHash] == target:
		pod = fmt.Sprintf("a pod was built from it (uid %s) and is left as it is", old.UID)
	case upgrade.BuiltBy(old, attempt):
		pod = fmt.Sprintf("the pod built from the patch (uid %s) is left as it is", old.UID)
	default:
		pod = fmt.Sprintf("the pod (uid %s) was not replaced by it", old.UID)
	}
	return fmt.Sprintf("spec.template of sandbox %s/%s was edited after SandboxUpdateOps %s patched it, and no longer carries the patch (%s); %s, and the upgrade is not counted: to keep the edit, create a new SandboxUpdateOps whose patch matches it (it resumes the sandbox); to put the patch back, `kubectl molt retry %s -n %s`",
		sb.Namespace, sb.Name, ops.Name, undone, pod, ops.Name, sb.Namespace)
}

// opsPatchUndone reads the ops named opsName and says how sb's template no longer
// carries its patch (upgrade.PatchUndone); "" when it does, and when that ops is
// gone, is another one (its UID is not opsUID) or changed its spec.patch since its
// check (the patch applied is not known).
func (c *cycler) opsPatchUndone(ctx context.Context, sb *agentsv1alpha1.Sandbox, opsName string, opsUID types.UID) (*agentsv1alpha1.SandboxUpdateOps, string, error) {
	ops, err := c.agents.AgentsV1alpha1().SandboxUpdateOps(sb.Namespace).Get(ctx, opsName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("get SandboxUpdateOps %s/%s to check the template of sandbox %s edited since its patch: %w", sb.Namespace, opsName, sb.Name, err)
	case ops.UID != opsUID || upgrade.PatchChanged(ops):
		return nil, "", nil
	}
	return ops, upgrade.PatchUndone(sb.Spec.Template, ops.Spec.Patch.Raw), nil
}
