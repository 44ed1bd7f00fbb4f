package selector

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// pauseForMisspelling pauses ops before its first sandbox when its patch adds
// a container that looks like a misspelt name of one the template has
// (upgrade.MisspeltContainers, checked on the first sandbox not started):
// spec.paused and upgrade.AnnotationMisspeltContainer in one write, against
// the ops as read. It reports whether it paused. Only once per ops: resuming
// it is how a user says the new container is meant. An ops with a sandbox
// already admitted is not paused.
func (s *Selector) pauseForMisspelling(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) (bool, error) {
	if _, done := ops.Annotations[upgrade.AnnotationMisspeltContainer]; done || sel.NotStarted != sel.Total() {
		return false, nil
	}
	var found []string
	for _, c := range sel.Candidates {
		if c.Sandbox.Spec.Template != nil {
			found = upgrade.MisspeltContainers(c.Sandbox.Spec.Template, ops.Spec.Patch.Raw)
			break
		}
	}
	if len(found) == 0 {
		return false, nil
	}
	value := strings.Join(found, ", ")
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": ops.ResourceVersion, "annotations": map[string]string{upgrade.AnnotationMisspeltContainer: value}},
		"spec":     map[string]any{"paused": true},
	})
	if err != nil {
		return false, err
	}
	if _, err := s.client.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).Patch(ctx, ops.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("pause ops %s/%s before its first sandbox (its patch adds %s): %w", ops.Namespace, ops.Name, value, err)
	}
	klog.FromContext(ctx).Info("Paused the ops before its first sandbox: its patch adds a container that looks like a misspelt name", "containers", value)
	return true, nil
}
