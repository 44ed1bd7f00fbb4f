package selector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A claim takes a sandbox out of its pool: it is labelled
// sandbox-claimed=true and loses its set's owner reference (upstream
// OpenKruise Agents). A claim written in two steps, or by hand, may stop
// after the label; the sandbox is then a user's (upgrade.PoolOf) but still
// owned by the set, and deleting the set would have the garbage collector
// delete it with the pool. The pool, the only writer of membership,
// finishes such a claim: it removes the set's owner reference.

// releaseClaimed removes set's owner reference from each sandbox of its
// namespace that is labelled sandbox-claimed=true and still carries it
// (release). It runs at every sync of the set, before anything else, so a
// claimed sandbox is released as soon as the pool sees it. A sandbox that
// changed since the cache showed it is looked at again shortly; an error is
// one a retry may fix.
func (p *pool) releaseClaimed(ctx context.Context, set *agentsv1alpha1.SandboxSet) error {
	claimed, err := p.sandboxes.Sandboxes(set.Namespace).List(labels.SelectorFromSet(labels.Set{agentsv1alpha1.LabelSandboxClaimed: "true"}))
	if err != nil {
		return fmt.Errorf("list claimed sandboxes of namespace %s: %w", set.Namespace, err)
	}
	for _, sb := range claimed {
		i := ownerIndex(sb, set.UID)
		if i < 0 {
			continue
		}
		if _, err := p.release(ctx, set, sb, i); err != nil {
			var refused *releaseRefused
			if !errors.As(err, &refused) {
				return err
			}
			// One sandbox the API server will not release does not stop the
			// pool's other work: said in the log, looked at again later.
			klog.FromContext(ctx).Error(err, "Claimed sandbox not released", "sandbox", klog.KObj(sb))
			p.enqueueAfter(set.Namespace+"/"+set.Name, releaseRefusedRetry)
		}
	}
	return p.labelReleased(ctx, set)
}

// ensureFinalizer adds FinalizerSandboxSetProtection to set if it is
// missing, so the set cannot vanish (and the garbage collector delete its
// members) before the sandboxes claimed from it are released.
func (p *pool) ensureFinalizer(ctx context.Context, set *agentsv1alpha1.SandboxSet) error {
	if slices.Contains(set.Finalizers, agentsv1alpha1.FinalizerSandboxSetProtection) {
		return nil
	}
	_, err := p.patchFinalizers(ctx, set, append(slices.Clone(set.Finalizers), agentsv1alpha1.FinalizerSandboxSetProtection), "add finalizer")
	return err
}

// releaseDeleted runs for a set being deleted that still has its finalizer.
// A claim written just before the delete may not be in the cache yet, so
// the claimed sandboxes are listed from the API server; each that still
// carries the set's owner reference is released (release), and the
// finalizer goes only once none is left, so the garbage collector, which
// waits for the set to be gone, deletes only the pool's own members. A
// sandbox that changed meanwhile is looked at again shortly, the finalizer
// kept until then. A set without the finalizer (made while no selector
// ran) gets the best the cache allows.
func (p *pool) releaseDeleted(ctx context.Context, set *agentsv1alpha1.SandboxSet) error {
	if !slices.Contains(set.Finalizers, agentsv1alpha1.FinalizerSandboxSetProtection) {
		return p.releaseClaimed(ctx, set)
	}
	list, err := p.client.AgentsV1alpha1().Sandboxes(set.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{agentsv1alpha1.LabelSandboxClaimed: "true"}).String()})
	if err != nil {
		return fmt.Errorf("list the claimed sandboxes of namespace %s before SandboxSet %s is deleted (its finalizer stays until they are released): %w", set.Namespace, set.Name, err)
	}
	settled := true
	for i := range list.Items {
		sb := &list.Items[i]
		j := ownerIndex(sb, set.UID)
		if j < 0 {
			continue
		}
		again, err := p.release(ctx, set, sb, j)
		if err != nil {
			return err
		}
		settled = settled && !again
	}
	if !settled {
		return nil // release requeued the set
	}
	finalizers := slices.DeleteFunc(slices.Clone(set.Finalizers), func(f string) bool { return f == agentsv1alpha1.FinalizerSandboxSetProtection })
	if done, err := p.patchFinalizers(ctx, set, finalizers, "remove finalizer"); !done {
		return err
	}
	klog.FromContext(ctx).Info("Released the deleted SandboxSet: its claimed sandboxes keep no owner reference to it", "claimed", len(list.Items))
	return nil
}

// patchFinalizers replaces set's finalizers, against the resourceVersion
// read (doing says what for, in an error). done is false when nothing was
// written: the set is gone (nothing to do), changed meanwhile (looked at
// again shortly), or the write failed (err).
func (p *pool) patchFinalizers(ctx context.Context, set *agentsv1alpha1.SandboxSet, finalizers []string, doing string) (done bool, err error) {
	if finalizers == nil {
		finalizers = []string{}
	}
	patch := metaPatch{Metadata: metaFields{ResourceVersion: set.ResourceVersion, Finalizers: &finalizers}}
	_, err = p.client.AgentsV1alpha1().SandboxSets(set.Namespace).Patch(ctx, set.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case apierrors.IsConflict(err):
		p.enqueueAfter(set.Namespace+"/"+set.Name, 200*time.Millisecond)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%s %s of SandboxSet %s/%s: %w", doing, agentsv1alpha1.FinalizerSandboxSetProtection, set.Namespace, set.Name, err)
	}
	return true, nil
}

// labelReleased finishes a claim made the other way round: a sandbox of the
// set's pool (labelled sandbox-pool=<set>, sandbox-claimed=false) whose owner
// reference to the set was removed is no member any more (the pool no longer
// counts or replaces it), so it is labelled sandbox-claimed=true, as the
// CLAIMED column and the set's status.selector then say. One merge patch
// against the resourceVersion read: a sandbox changed meanwhile is looked at
// again shortly.
func (p *pool) labelReleased(ctx context.Context, set *agentsv1alpha1.SandboxSet) error {
	unclaimed, err := p.sandboxes.Sandboxes(set.Namespace).List(labels.SelectorFromSet(labels.Set{
		agentsv1alpha1.LabelSandboxPool: set.Name, agentsv1alpha1.LabelSandboxClaimed: "false"}))
	if err != nil {
		return fmt.Errorf("list the pool sandboxes of SandboxSet %s/%s: %w", set.Namespace, set.Name, err)
	}
	for _, sb := range unclaimed {
		if ownerIndex(sb, set.UID) >= 0 || sb.DeletionTimestamp != nil || metav1.GetControllerOf(sb) != nil {
			continue
		}
		patch := metaPatch{Metadata: metaFields{ResourceVersion: sb.ResourceVersion, Labels: map[string]*string{agentsv1alpha1.LabelSandboxClaimed: ptr("true")}}}
		_, err = p.client.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case apierrors.IsConflict(err):
			p.enqueueAfter(set.Namespace+"/"+set.Name, 200*time.Millisecond)
			continue
		case err != nil:
			return fmt.Errorf("label sandbox %s/%s claimed (its owner reference to SandboxSet %s was removed): %w", sb.Namespace, sb.Name, set.Name, err)
		}
		klog.FromContext(ctx).Info("Labelled claimed a sandbox whose owner reference to its SandboxSet was removed", "sandbox", klog.KObj(sb), "uid", sb.UID)
	}
	return nil
}

// release removes owner reference i (set's) from the claimed sandbox sb,
// in one JSON patch that first tests what the cache showed: the same
// sandbox (its UID: never one created again under its name), still
// labelled claimed, the set's reference still at i. A failed test (the
// reference already removed by an earlier try, the sandbox unclaimed or
// changed meanwhile) writes nothing, and the set is synced again shortly to
// look at the sandbox as it is now; a sandbox gone needs nothing. The write
// is whole or not at all, so repeating it, or dying before or after it,
// leaves the sandbox owned or released, never half.
func (p *pool) release(ctx context.Context, set *agentsv1alpha1.SandboxSet, sb *agentsv1alpha1.Sandbox, i int) (again bool, err error) {
	body, err := releasePatch(sb, i)
	if err != nil {
		return false, fmt.Errorf("encode the release of claimed sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	_, err = p.client.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.JSONPatchType, body, metav1.PatchOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case apierrors.IsInvalid(err) || apierrors.IsConflict(err):
		if apierrors.IsInvalid(err) && p.releaseTestsHold(ctx, sb, i) {
			// Every test holds on the sandbox as it is now: the API server
			// refuses the write itself (a validation rule, an admission
			// policy), and looking again every 200 ms changes nothing.
			// Retried with the queue's backoff, said at every try.
			return false, &releaseRefused{fmt.Errorf("the API server refuses to remove SandboxSet %s's owner reference from claimed sandbox %s/%s: %w; the set keeps its finalizer %s until it can (deleting the set now would delete the claimed sandbox): fix what refuses the write (an admission policy or validation rule on sandboxes)",
				set.Name, sb.Namespace, sb.Name, err, agentsv1alpha1.FinalizerSandboxSetProtection)}
		}
		// A test failed: the cache lags behind the sandbox.
		klog.FromContext(ctx).V(2).Info("A claimed sandbox changed since it was read; looking again", "sandbox", klog.KObj(sb), "cause", err.Error())
		p.enqueueAfter(set.Namespace+"/"+set.Name, 200*time.Millisecond)
		return true, nil
	case err != nil:
		return false, fmt.Errorf("remove SandboxSet %s's owner reference from claimed sandbox %s/%s: %w", set.Name, sb.Namespace, sb.Name, err)
	}
	klog.FromContext(ctx).Info("Released a claimed sandbox: removed its SandboxSet's owner reference, so deleting the set does not delete it", "sandbox", klog.KObj(sb), "uid", sb.UID)
	return false, nil
}

// releaseRefused is release's error when the API server refuses the write
// itself (not a stale cache).
type releaseRefused struct{ err error }

func (r *releaseRefused) Error() string { return r.err.Error() }
func (r *releaseRefused) Unwrap() error { return r.err }

// releaseRefusedRetry is how soon a live set looks again at a claimed
// sandbox whose release the API server refused.
const releaseRefusedRetry = 30 * time.Second

// releaseTestsHold reports whether release's tests of sb (same UID, still
// labelled claimed, the reference at i still the set's) hold on the sandbox
// as the API server has it now; false when it cannot be read.
func (p *pool) releaseTestsHold(ctx context.Context, sb *agentsv1alpha1.Sandbox, i int) bool {
	now, err := p.client.AgentsV1alpha1().Sandboxes(sb.Namespace).Get(ctx, sb.Name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	return now.UID == sb.UID && now.Labels[agentsv1alpha1.LabelSandboxClaimed] == "true" &&
		i < len(now.OwnerReferences) && now.OwnerReferences[i].UID == sb.OwnerReferences[i].UID
}

// releasePatch is release's JSON patch of sb: tests of its UID, its claimed
// label and owner reference i's UID, then the removal of that reference.
func releasePatch(sb *agentsv1alpha1.Sandbox, i int) ([]byte, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	ref := fmt.Sprintf("/metadata/ownerReferences/%d", i)
	return json.Marshal([]op{
		{Op: "test", Path: "/metadata/uid", Value: sb.UID},
		{Op: "test", Path: "/metadata/labels/" + upgrade.PointerToken(agentsv1alpha1.LabelSandboxClaimed), Value: "true"},
		{Op: "test", Path: ref + "/uid", Value: sb.OwnerReferences[i].UID},
		{Op: "remove", Path: ref},
	})
}

// ownerIndex is the index of the owner reference of sb whose UID is uid,
// -1 when it has none.
func ownerIndex(sb *agentsv1alpha1.Sandbox, uid types.UID) int {
	for i, ref := range sb.OwnerReferences {
		if ref.UID == uid {
			return i
		}
	}
	return -1
}
