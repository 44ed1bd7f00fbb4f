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
		return "", p.pinFailed(ctx, sb, "its hooks", upgrade.AnnotationAttemptHooks, err)
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
		return "", p.pinFailed(ctx, sb, "its CheckpointRestore strategy", upgrade.AnnotationUpgradeStrategy, err)
	}
	return written.ResourceVersion, nil
}

// pinRefused is a pin of a direct attempt that the API server refused for
// good (an admission policy or webhook on annotation writes, the patcher's
// RBAC): the attempt cannot start safely, and fails at once rather than at
// the watchdog's deadline after redeliveries that are refused alike.
type pinRefused struct {
	what, annotation, words string
}

func (e *pinRefused) Error() string {
	return fmt.Sprintf("the API server refused annotation %s, which fixes %s: %s", e.annotation, e.what, e.words)
}

// message is the attempt's failure for the user: what was refused, that
// nothing changed, and the way on.
func (e *pinRefused) message(sb *agentsv1alpha1.Sandbox) string {
	return fmt.Sprintf("the API server refused annotation %s on sandbox %s/%s, which fixes %s for this direct upgrade as it begins: %s; the template and the pod were not touched (at most the annotation of its hooks was written), preUpgrade did not run and the pod keeps running: let molt's patcher write molt.dev/ annotations on Sandboxes (an admission policy or webhook, or the patcher's RBAC), then change spec.template again to upgrade",
		e.annotation, sb.Namespace, sb.Name, e.what, e.words)
}

// pinFailed is the error of a pin's write: a *pinRefused when the API server
// refused it for good and the sandbox is still the one read (the same uid,
// not being deleted, its spec at the generation read: the attempt is still
// the sandbox's latest); otherwise an error to retry on, which reads the
// sandbox again (a sandbox created again under the name fails the pin's uid
// test, which is Invalid too).
func (p *Patcher) pinFailed(ctx context.Context, sb *agentsv1alpha1.Sandbox, what, annotation string, err error) error {
	wrapped := fmt.Errorf("write annotation %s of sandbox %s/%s, which fixes %s: %w", annotation, sb.Namespace, sb.Name, what, err)
	words := upgrade.Refusal(err)
	if words == "" {
		return wrapped
	}
	now, gerr := p.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Get(ctx, sb.Name, metav1.GetOptions{})
	switch {
	case gerr != nil:
		return fmt.Errorf("%w; then get it: %w", wrapped, gerr)
	case now.UID != sb.UID || now.DeletionTimestamp != nil || now.Generation != sb.Generation:
		return fmt.Errorf("%w (the sandbox changed since read: will read it again)", wrapped)
	}
	return &pinRefused{what: what, annotation: annotation, words: words}
}
