package selector

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// misspellingTries bounds the templates pauseForMisspelling reads: a
// namespace's sandboxes mostly share one.
const misspellingTries = 20

// pauseForMisspelling pauses ops before its first sandbox when its patch adds
// a container that looks like a misspelt name of one the template has
// (upgrade.MisspeltContainers, on the templates of the sandboxes that would
// start from their own): spec.paused, upgrade.AnnotationMisspeltContainer and
// upgrade.AnnotationMisspeltPausedAt in one write, against the ops as read.
// It reports whether admission must wait (paused, or the ops changed since
// read). Only once per ops: resuming it is how a user says the new container
// is meant. An ops with a sandbox already admitted is not paused.
func (s *Selector) pauseForMisspelling(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) (bool, error) {
	if _, done := ops.Annotations[upgrade.AnnotationMisspeltContainer]; done || sel.NotStarted != sel.Total() {
		return false, nil
	}
	// The sandboxes that would start from their own template (not resuming
	// one an earlier attempt patched), up to misspellingTries of them.
	var found []string
	tried := 0
	for _, c := range sel.Candidates {
		if c.Resume || c.Sandbox.Spec.Template == nil {
			continue
		}
		if found = upgrade.MisspeltContainers(c.Sandbox.Spec.Template, ops.Spec.Patch.Raw); len(found) > 0 {
			break
		}
		if tried++; tried == misspellingTries {
			break
		}
	}
	if len(found) == 0 {
		return false, nil
	}
	value := strings.Join(found, ", ")
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": ops.ResourceVersion, "annotations": map[string]string{
			upgrade.AnnotationMisspeltContainer: value,
			// The write changes spec, so it moves the generation by one.
			upgrade.AnnotationMisspeltPausedAt: strconv.FormatInt(ops.Generation+1, 10),
		}},
		"spec": map[string]any{"paused": true},
	})
	if err != nil {
		return false, err
	}
	_, err = s.client.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).Patch(ctx, ops.Name, types.MergePatchType, body, metav1.PatchOptions{})
	if apierrors.IsConflict(err) {
		// Changed since read (the finalizer just added, a status write):
		// nothing is admitted now, and its update event brings it back.
		klog.FromContext(ctx).V(2).Info("Ops changed since read; will look again before pausing it for a misspelt container", "containers", value)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("pause ops %s/%s before its first sandbox (its patch adds %s): %w", ops.Namespace, ops.Name, value, err)
	}
	klog.FromContext(ctx).Info("Paused the ops before its first sandbox: its patch adds a container that looks like a misspelt name", "containers", value)
	return true, nil
}
