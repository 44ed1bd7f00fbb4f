package patcher

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// What a direct attempt fixes on its sandbox before anything else happens:
// its hooks, and its strategy when that is CheckpointRestore. An ops's
// attempt fixes both with its spec write (specPatch).

// pinDirectHooks fixes the hooks a direct attempt runs, the sandbox's
// spec.lifecycle as the attempt begins (upgrade.AnnotationAttemptHooks),
// before anything else happens: an edit of spec.lifecycle mid-attempt then
// applies to the next upgrade, and the attempt's backup and restore stay one
// pair. It returns the written sandbox's resourceVersion ("" when nothing was
// written: an ops's attempt, which fixes them with its spec, or one fixed
// already).
func (p *Patcher) pinDirectHooks(ctx context.Context, sb *agentsv1alpha1.Sandbox, attempt string) (string, error) {
	if !strings.HasPrefix(attempt, upgrade.DirectAttemptPrefix) || upgrade.HooksFixedFor(sb) == attempt {
		return "", nil // an earlier delivery fixed them (spec.lifecycle may have changed since)
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	ops := []op{{Op: "test", Path: "/metadata/uid", Value: sb.UID}} // not a sandbox of the name created since
	if sb.Annotations == nil {
		ops = append(ops, op{Op: "add", Path: "/metadata/annotations", Value: map[string]string{}})
	}
	ops = append(ops, op{Op: "add", Path: "/metadata/annotations/" + upgrade.PointerToken(upgrade.AnnotationAttemptHooks), Value: upgrade.AttemptHooksValue(attempt, sb.Spec.Lifecycle)})
	body, err := json.Marshal(ops)
	if err != nil {
		return "", events.Permanent(fmt.Errorf("encode the hooks of direct attempt %s on sandbox %s/%s: %w", attempt, sb.Namespace, sb.Name, err))
	}
	written, err := p.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.JSONPatchType, body, metav1.PatchOptions{})
	if err != nil {
		return "", fmt.Errorf("fix the hooks of direct attempt %s on sandbox %s/%s (annotation %s): %w", attempt, sb.Namespace, sb.Name, upgrade.AnnotationAttemptHooks, err)
	}
	return written.ResourceVersion, nil
}

// pinDirectCheckpointRestore writes the strategy mark of a direct attempt
// that its sandbox's spec.upgradePolicy makes a CheckpointRestore, before
// anything else happens: ChecksPoint then reads the mark, not the policy,
// so a user who removes or changes the policy mid-attempt does not turn it
// into a Recreate that deletes the old pod without its checkpoint. It
// returns the written sandbox's resourceVersion ("" when nothing was
// written).
func (p *Patcher) pinDirectCheckpointRestore(ctx context.Context, sb *agentsv1alpha1.Sandbox, attempt string) (string, error) {
	value := upgrade.StrategyValue(attempt)
	if !strings.HasPrefix(attempt, upgrade.DirectAttemptPrefix) || !upgrade.ChecksPoint(sb, attempt) || sb.Annotations[upgrade.AnnotationUpgradeStrategy] == value {
		return "", nil
	}
	patch := upgrade.AnnotationPatch(upgrade.AnnotationUpgradeStrategy, value)
	written, err := p.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return "", fmt.Errorf("write the strategy mark %q of sandbox %s/%s: %w", value, sb.Namespace, sb.Name, err)
	}
	return written.ResourceVersion, nil
}
