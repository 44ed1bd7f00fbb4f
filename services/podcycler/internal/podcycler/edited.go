package podcycler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// The ops is read only in that case, never on the happy path.
func (c *cycler) patchUndone(ctx context.Context, sb *agentsv1alpha1.Sandbox, old *corev1.Pod, d events.Data, target string) (string, error) {
	if d.Ops.Name == "" || d.TargetRevision == "" || d.TargetRevision == target {
		return "", nil
	}
	ops, err := c.agents.AgentsV1alpha1().SandboxUpdateOps(sb.Namespace).Get(ctx, d.Ops.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("get SandboxUpdateOps %s/%s to check the template of sandbox %s edited since its patch: %w", sb.Namespace, d.Ops.Name, sb.Name, err)
	case ops.UID != d.Ops.UID || upgrade.PatchChanged(ops):
		return "", nil
	}
	undone := upgrade.PatchUndone(sb.Spec.Template, ops.Spec.Patch.Raw)
	if undone == "" {
		return "", nil
	}
	pod := "no new pod was built from it"
	if old != nil && old.DeletionTimestamp == nil && !upgrade.BuiltBy(old, d.Attempt) {
		pod = fmt.Sprintf("the pod (uid %s) was not replaced by it", old.UID)
	}
	return fmt.Sprintf("spec.template of sandbox %s/%s was edited after SandboxUpdateOps %s patched it, and no longer carries the patch (%s); %s, and the upgrade is not counted: to keep the edit, create a new SandboxUpdateOps whose patch matches it (it resumes the sandbox from here, its backup kept); to put the patch back, `kubectl molt retry %s -n %s`",
		sb.Namespace, sb.Name, ops.Name, undone, pod, ops.Name, sb.Namespace), nil
}
