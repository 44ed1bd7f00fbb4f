package selector

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// relabel puts the ops label back on the sandboxes of ops that lost it mid
// attempt (upgrade.LostLabelMidAttempt), and the claim annotation where it went
// with the label: the attempt runs to its end, counted by
// its ops, as it does when the ops itself is deleted. The label's owner is
// the selector; a user who wants a sandbox out of an ops waits for its
// attempt to end, or deletes the ops. The patch holds only on the sandbox
// as read (resourceVersion): a conflict is looked at again on the next sync.
func (s *Selector) relabel(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sandboxes []*agentsv1alpha1.Sandbox) error {
	for _, sb := range sandboxes {
		if !upgrade.LostLabelMidAttempt(sb, ops.Name, ops.UID) {
			continue
		}
		patch := metaPatch{Metadata: metaFields{ResourceVersion: sb.ResourceVersion,
			Labels: map[string]*string{agentsv1alpha1.LabelUpdateOps: ptr(ops.Name)}}}
		if sb.Annotations[upgrade.AnnotationClaim] == "" {
			// Wiped with the label (a replace of an older manifest).
			patch.Metadata.Annotations = map[string]*string{upgrade.AnnotationClaim: ptr(upgrade.ClaimValue(ops.Name, string(ops.UID)))}
		}
		_, err := s.client.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{})
		switch {
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			continue // gone, or changed since read: the change syncs the ops again
		case err != nil:
			return fmt.Errorf("put label %s=%s back on sandbox %s/%s, removed while its upgrade is in a stage: %w", agentsv1alpha1.LabelUpdateOps, ops.Name, sb.Namespace, sb.Name, err)
		}
		reason, _ := upgrade.ReasonFor(sb, string(ops.UID))
		klog.FromContext(ctx).Info("Put the ops label back on a sandbox that lost it mid-upgrade; its attempt runs to its end", "sandbox", klog.KObj(sb), "stage", reason, "claimRestored", patch.Metadata.Annotations != nil)
	}
	return nil
}
