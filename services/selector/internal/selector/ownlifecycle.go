package selector

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// ownLifecycleBack puts sb's own spec.lifecycle back in place of the hooks an
// ops wrote (upgrade.AnnotationOwnLifecycle), once that ops is done with the
// sandbox (upgrade.OwnLifecycleDue: no ops that may still drive it claims it,
// and its last attempt succeeded). It reports whether it wrote: the caller
// then returns, and the write's own event brings the sandbox back with the
// cache holding it.
//
// It runs first on any change of the sandbox, and never while a direct
// attempt requested is not recorded yet (this process's memory, then the
// stream: its hooks must stay one pair); and again right before a direct
// upgrade is requested (beforeRequest, once the direct loop has found that
// no attempt requested earlier runs), so a direct attempt never starts with
// the hooks of an ops that is done: its preUpgrade and postUpgrade are both
// the sandbox's own. The one merge patch carries the resourceVersion read as
// a precondition: an ops that claims the sandbox meanwhile, or a spec edited
// since, makes it fail (Conflict), and the sandbox is looked at again as it
// is then. A spec.lifecycle someone changed since the ops wrote it stays;
// only the annotation goes. A write the API server refuses for good
// (upgrade.Refusal) is logged and leaves both as they are: it holds nothing
// back.
func (d *direct) ownLifecycleBack(ctx context.Context, key string, sb *agentsv1alpha1.Sandbox, beforeRequest bool) (bool, error) {
	own, restore, present, readable := upgrade.OwnLifecycleBack(sb)
	if !present {
		return false, nil
	}
	holds := func(name string) bool {
		o, err := d.ops.SandboxUpdateOps(sb.Namespace).Get(name)
		return err == nil && upgrade.HoldsNamespace(o)
	}
	if !upgrade.OwnLifecycleDue(sb, holds) {
		return false, nil
	}
	if !beforeRequest {
		// Any change of the sandbox brings it here: a direct attempt
		// requested and not recorded yet, by this process or one before
		// it (the stream says), may be running its hooks.
		if prev, _ := d.unrecorded(key, sb, "", time.Now()); prev != "" {
			return false, nil
		}
		if pending, err := d.pendingDirect(ctx, sb); err != nil || pending != "" {
			return false, err
		}
	}
	body, err := ownLifecyclePatch(sb, own, restore)
	if err != nil {
		return false, fmt.Errorf("encode the own spec.lifecycle of sandbox %s (annotation %s): %w", key, upgrade.AnnotationOwnLifecycle, err)
	}
	_, err = d.client.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, body, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if apierrors.IsConflict(err) {
		return false, fmt.Errorf("put back the own spec.lifecycle of sandbox %s: it changed since read, will look again: %w", key, err)
	}
	if words := upgrade.Refusal(err); words != "" {
		// Refused for good (an admission policy or webhook, the selector's
		// RBAC): the ops's hooks stay, and so does the annotation; the
		// sandbox's direct upgrades are not held back for it (they run the
		// ops's hooks, one pair).
		klog.FromContext(ctx).Info("The API server refused to put the sandbox's own hooks back (spec.lifecycle keeps the ops's; fix what refuses it, or set spec.lifecycle by hand and remove the annotation)",
			"sandbox", klog.KObj(sb), "annotation", upgrade.AnnotationOwnLifecycle, "refusal", words)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("put back the own spec.lifecycle of sandbox %s (annotation %s): %w", key, upgrade.AnnotationOwnLifecycle, err)
	}
	switch {
	case restore:
		klog.FromContext(ctx).Info("Put the sandbox's own hooks back in place of the ops's (spec.lifecycle)", "sandbox", klog.KObj(sb), "ops", sb.Labels[agentsv1alpha1.LabelUpdateOps])
	case !readable:
		klog.FromContext(ctx).Info("Removed an annotation that cannot be read (changed by hand?): the sandbox's own hooks it kept are not known, spec.lifecycle keeps the ops's; set spec.lifecycle to the sandbox's own hooks by hand",
			"sandbox", klog.KObj(sb), "annotation", upgrade.AnnotationOwnLifecycle, "value", sb.Annotations[upgrade.AnnotationOwnLifecycle])
	default:
		klog.FromContext(ctx).Info("Left spec.lifecycle as it is: it was changed since the ops wrote its hooks", "sandbox", klog.KObj(sb))
	}
	return true, nil
}

// ownLifecyclePatch is ownLifecycleBack's JSON merge patch: the
// resourceVersion read, which the API server takes as a precondition
// (Conflict when the sandbox changed since, or is another of the name: a
// refusal is told apart by its code, with no read the selector's RBAC would
// need), the annotation removed, and, when restore, spec.lifecycle made own
// (removed when own is nil). A merge patch applies to any sandbox (removing
// what is not there changes nothing), so a copy read before the last write,
// the selector's own restore, meets the precondition as a Conflict, not as
// an Invalid patch that would pass for a refusal.
func ownLifecyclePatch(sb *agentsv1alpha1.Sandbox, own *agentsv1alpha1.SandboxLifecycle, restore bool) ([]byte, error) {
	patch := map[string]any{"metadata": map[string]any{
		"resourceVersion": sb.ResourceVersion,
		"annotations":     map[string]any{upgrade.AnnotationOwnLifecycle: nil},
	}}
	if restore {
		lifecycle, err := lifecycleMergePatch(sb.Spec.Lifecycle, own)
		if err != nil {
			return nil, err
		}
		patch["spec"] = map[string]any{"lifecycle": lifecycle}
	}
	return json.Marshal(patch)
}

// lifecycleMergePatch is the merge patch that makes spec.lifecycle to of
// from: null for a field to lacks at any depth, so no hook of from survives
// beside to's.
func lifecycleMergePatch(from, to *agentsv1alpha1.SandboxLifecycle) (json.RawMessage, error) {
	if to == nil {
		return json.RawMessage("null"), nil
	}
	toJSON, err := json.Marshal(to)
	if err != nil || from == nil {
		return toJSON, err
	}
	fromJSON, err := json.Marshal(from)
	if err != nil {
		return nil, err
	}
	return jsonpatch.CreateMergePatch(fromJSON, toJSON)
}

// opsEndedHandler maps an ops that ends (Completed, Failed, or gone) to the
// sandboxes its label names that keep hooks of their own aside
// (upgrade.AnnotationOwnLifecycle): nothing else of theirs changes then, and
// ownLifecycleBack waits for it.
func (d *direct) opsEndedHandler(enqueue func(string)) cache.ResourceEventHandler {
	on := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		ops, ok := obj.(*agentsv1alpha1.SandboxUpdateOps)
		if !ok || (upgrade.HoldsNamespace(ops) && ops.DeletionTimestamp == nil) {
			return
		}
		claimed := labels.SelectorFromSet(labels.Set{agentsv1alpha1.LabelUpdateOps: ops.Name})
		list, err := d.sandboxes.Sandboxes(ops.Namespace).List(claimed)
		if err != nil {
			utilruntime.HandleError(fmt.Errorf("list sandboxes of ops %s/%s: %w", ops.Namespace, ops.Name, err))
			return
		}
		for _, sb := range list {
			if _, kept := sb.Annotations[upgrade.AnnotationOwnLifecycle]; kept {
				enqueue(sb.Namespace + "/" + sb.Name)
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { on(obj) },
		DeleteFunc: on,
	}
}
