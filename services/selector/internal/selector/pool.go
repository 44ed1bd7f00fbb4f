package selector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	listers "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// pool keeps each SandboxSet's warm pool: spec.replicas unclaimed sandboxes
// on the set's current template. A member is a Sandbox whose controller is
// the set and that is not labelled claimed (upgrade.IsPoolMember): a
// sandbox labelled sandbox-claimed=true, or whose owner reference was
// removed, has been claimed and leaves the pool. The selector is the pool's
// only writer of members; statusagg writes the set's status.
type pool struct {
	client       versioned.Interface
	sets         listers.SandboxSetLister
	sandboxes    listers.SandboxLister
	enqueueAfter func(key string, d time.Duration)
	// dryRun asks the API server whether it would create pod
	// (upgrade.DryRunCreatePod with the selector's clientset; tests stub it).
	dryRun upgrade.PodDryRun
	// memberDryRun asks the API server whether it would create the member
	// sandbox sb (a server-side dry run): the API server's words when it
	// refuses it for good, "" when it would create it. nil: not asked
	// (unit tests of the plan).
	memberDryRun func(ctx context.Context, sb *agentsv1alpha1.Sandbox) (string, error)
	// record writes a set's upgrade.AnnotationTemplateCheck: value, or
	// nothing (the annotation removed) when value is "".
	// record writes the set's annotation key ("" removes it).
	record func(ctx context.Context, set *agentsv1alpha1.SandboxSet, key, value string) error

	mu sync.Mutex
	// expect holds, per set, the creates and deletes of its last sync until
	// the cache shows them: deciding again on a cache that lags behind its
	// own writes would replace more members than maxUnavailable allows.
	expect map[string]*expectation
	// checks holds, per set, the verdict on its template at its current
	// revision, so the API server is asked once per set UID and revision
	// rather than once per sync.
	checks map[string]templateCheck
	// deaths holds, per set, its dead members of the current revision
	// deleted lately (pool_dead.go).
	deaths map[string]deaths
}

// expectation is what one sync wrote and waits to see in the cache.
type expectation struct {
	created  []string    // names of members created
	deleted  []types.UID // members deleted
	deadline time.Time   // after which the cache is trusted anyway
}

// expectWait bounds how long a sync waits for the cache to show its writes.
const expectWait = 30 * time.Second

// satisfied reports whether the cache shows every write of e.
func (p *pool) satisfied(ns string, e *expectation) bool {
	if time.Now().After(e.deadline) {
		return true
	}
	for _, name := range e.created {
		if _, err := p.sandboxes.Sandboxes(ns).Get(name); err != nil {
			return false
		}
	}
	all, err := p.sandboxes.Sandboxes(ns).List(labels.Everything())
	if err != nil {
		return false
	}
	for _, sb := range all {
		if slices.Contains(e.deleted, sb.UID) && sb.DeletionTimestamp == nil {
			return false
		}
	}
	return true
}

// sync brings one SandboxSet's pool in line with its spec, in this order:
//
//  1. load the set; gone → forget its expectations and template verdict;
//  2. being deleted → forget as in 1, release the sandboxes labelled claimed
//     that still carry its owner reference, then remove the set's finalizer
//     (releaseDeleted), and do nothing else (the garbage collector then
//     removes its members through their owner references);
//  3. add the finalizer if missing, and release the sandboxes labelled
//     claimed that still carry its owner reference (releaseClaimed), so
//     deleting the set never deletes them;
//  4. its members (upgrade.IsPoolMember: controller = the set, not labelled
//     claimed, not being deleted) and its revision
//     (upgrade.Revision of its template);
//  5. delete dead members (phase Succeeded or Failed), but keep those of
//     the current revision once deadReplaced of them died within
//     deadWindow (removeDead, recorded on the set for statusagg to show as
//     MembersFailing): they stay members, not available;
//  6. plan the rest (planPool): the outdated members to replace, the surplus
//     to remove, how many to create;
//  7. if the plan deletes an outdated member or creates one, check first
//     that a pod from the template would run (templateRefused); refused →
//     delete nothing outdated and create nothing (recorded on the set, which
//     statusagg shows as TemplateRefused), scaling down still proceeds;
//  8. rolling update: with fewer than maxUnavailable members unavailable
//     (not Running), delete outdated members (another template-hash), the
//     unavailable ones first, then the oldest, up to that budget;
//  9. scale down: more members than spec.replicas → delete the surplus, the
//     least ready and oldest first;
//  10. scale up: fewer → create the missing ones on the current revision, at
//     most spec.scaleStrategy.maxUnavailable not yet available at once, in
//     slow-start batches (1, 2, 4, ...), stopping at the first error.
//
// Every delete carries the member's UID and resourceVersion as
// preconditions, so a sandbox claimed or replaced meanwhile is never hit.
func (p *pool) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("sandboxset", klog.KRef(ns, name))
	ctx = klog.NewContext(ctx, logger)
	set, err := p.sets.SandboxSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		p.forget(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get SandboxSet %s: %w", key, err)
	}
	if set.DeletionTimestamp != nil {
		p.forget(key)
		return p.releaseDeleted(ctx, set)
	}
	if err := p.ensureFinalizer(ctx, set); err != nil {
		return err
	}
	if err := p.releaseClaimed(ctx, set); err != nil {
		return err
	}
	if set.Spec.Template == nil {
		why := set.Spec.TemplateProblem()
		if why == "" {
			why = agentsv1alpha1.NoSetTemplateProblem // only spec.templateRef, or nothing
		}
		logger.V(2).Info("Skip: no template to build members from; the pool creates, replaces and deletes nothing (statusagg shows TemplateRefused)", "cause", why)
		return nil
	}
	p.mu.Lock()
	e := p.expect[key]
	p.mu.Unlock()
	if e != nil && !p.satisfied(ns, e) {
		logger.V(4).Info("Skip: the cache does not show the last sync's writes yet")
		p.enqueueAfter(key, 500*time.Millisecond)
		return nil
	}
	e = &expectation{deadline: time.Now().Add(expectWait)}
	defer func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(e.created)+len(e.deleted) == 0 {
			delete(p.expect, key)
		} else {
			p.expect[key] = e
		}
	}()
	err = p.reconcile(ctx, set, e)
	if errors.Is(err, errChanged) {
		logger.V(2).Info("A member changed since it was read; looking again")
		p.enqueueAfter(key, 200*time.Millisecond)
		return nil
	}
	return err
}

// forget drops what the pool remembers of the set key. A set re-created
// under the same name then starts at once, instead of waiting up to
// expectWait for its predecessor's creates, which the cache will never
// show (the garbage collector deletes them with their owner).
func (p *pool) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.expect, key)
	delete(p.checks, key)
	delete(p.deaths, key)
}

// reconcile is steps 4 to 10 of sync for set, recording its writes in e.
func (p *pool) reconcile(ctx context.Context, set *agentsv1alpha1.SandboxSet, e *expectation) error {
	logger := klog.FromContext(ctx)
	key := set.Namespace + "/" + set.Name
	revision, err := upgrade.Revision(set.Spec.Template)
	if err != nil {
		return fmt.Errorf("hash template of SandboxSet %s: %w", key, err)
	}
	members, err := p.members(set)
	if err != nil {
		return err
	}

	var live, deadMembers []*agentsv1alpha1.Sandbox
	for _, sb := range members {
		if dead(sb) {
			deadMembers = append(deadMembers, sb)
			continue
		}
		live = append(live, sb)
	}
	kept, err := p.removeDead(ctx, e, set, revision, deadMembers, time.Now())
	if err != nil {
		return err
	}
	// Dead members kept are members not available: not replaced, and
	// counted against maxUnavailable.
	live = append(live, kept...)

	limits := poolLimits{replicas: int(set.Spec.Replicas), maxUnavailable: PoolMaxUnavailable(set)}
	limits.maxCreating, limits.creatingLimited = poolScaleLimit(set)
	plan := planPool(live, revision, limits)
	if _, recorded := set.Annotations[upgrade.AnnotationTemplateCheck]; recorded && upgrade.TemplateRefusal(set, revision) == "" {
		// A refusal of an earlier revision: the template changed since (perhaps
		// back to what the members run, so nothing below checks it again).
		if err := p.recordVerdict(ctx, set, revision, ""); err != nil {
			return err
		}
	}
	if plan.needsTemplate() || upgrade.TemplateRefusal(set, revision) != "" {
		// A recorded refusal is checked again even when this sync needs no
		// template (a scale-down): a refusal by quota or admission can clear,
		// and the set's TemplateRefused condition must not outlive it.
		refused, err := p.templateRefused(ctx, set, revision, baselineTemplate(live, revision), time.Now())
		if err != nil {
			return err
		}
		if refused != "" {
			logger.V(2).Info("Skip the rolling update and scale-up: the template is refused", "revision", revision, "outdated", len(plan.outdated), "toCreate", plan.create)
			limits.templateRefused = true
			plan = planPool(live, revision, limits)
		}
	}
	for _, sb := range plan.outdated {
		if err := p.delete(ctx, e, sb, "outdated: template-hash "+sb.Labels[agentsv1alpha1.LabelTemplateHash]+", want "+revision); err != nil {
			return err
		}
	}
	for _, sb := range plan.surplus {
		if err := p.delete(ctx, e, sb, "scale down"); err != nil {
			return err
		}
	}
	created, err := slowStart(plan.create, func() error { return p.create(ctx, e, set, revision) })
	if created > 0 {
		logger.Info("Created pool members", "count", created, "revision", revision, "replicas", limits.replicas)
	}
	if rerr := p.recordCreateRefusal(ctx, set, err); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// recordCreateRefusal keeps the set's upgrade.AnnotationMemberCreateError in
// line with this sync's creates: the API server's refusal (Forbidden,
// Invalid, BadRequest: a ResourceQuota on sandboxes, an admission webhook,
// the selector's RBAC) while a create is refused, even after others
// succeeded (a quota with room for fewer than the pool needs), no
// annotation once every create wanted succeeded or none is wanted. statusagg shows it as the set's
// MemberCreateRefused condition and Event; the sync is retried meanwhile.
func (p *pool) recordCreateRefusal(ctx context.Context, set *agentsv1alpha1.SandboxSet, err error) error {
	want := ""
	if err != nil && upgrade.PodCreateRefused(err) {
		want = upgrade.MemberCreateErrorValue(err, set.Name)
	}
	_, recorded := set.Annotations[upgrade.AnnotationMemberCreateError]
	switch {
	case want != "" && set.Annotations[upgrade.AnnotationMemberCreateError] == want:
		return nil
	case want == "" && (!recorded || err != nil):
		// Nothing recorded, or a failure that says nothing new (a
		// timeout): the record stands until every create this sync
		// wanted succeeds, or none is wanted.
		return nil
	}
	if want != "" {
		klog.FromContext(ctx).Info("The API server refuses the pool's new members; retrying", "cause", want)
	}
	if err := p.record(ctx, set, upgrade.AnnotationMemberCreateError, want); err != nil {
		return fmt.Errorf("record the refused member create of SandboxSet %s/%s: %w", set.Namespace, set.Name, err)
	}
	return nil
}

// poolLimits bound what one sync may do to a set's live members.
type poolLimits struct {
	replicas int // spec.replicas
	// maxUnavailable is how many members the rolling update may leave
	// unavailable (PoolMaxUnavailable).
	maxUnavailable int
	// maxCreating, when creatingLimited, is how many members may be created
	// but not yet available at once (poolScaleLimit).
	maxCreating     int
	creatingLimited bool
	// templateRefused says a pod from the current revision would not run:
	// nothing outdated is deleted and nothing is created.
	templateRefused bool
}

// poolPlan is what one sync does to a set's live members.
type poolPlan struct {
	outdated []*agentsv1alpha1.Sandbox // to delete: built from another revision
	surplus  []*agentsv1alpha1.Sandbox // to delete: beyond spec.replicas
	create   int                       // to create on the current revision
}

// needsTemplate reports whether the plan replaces an outdated member or
// creates one: what a refused template must stop (rule 8).
func (pl poolPlan) needsTemplate() bool {
	return len(pl.outdated) > 0 || pl.create > 0
}

// planPool decides, from the cache alone, what a sync does to live (the
// set's members, dead ones left out but for those kept) on revision, within limits: steps 8
// to 10 of sync. It does not change live.
func planPool(live []*agentsv1alpha1.Sandbox, revision string, limits poolLimits) poolPlan {
	var plan poolPlan
	live = slices.Clone(live)
	if !limits.templateRefused {
		unavailable := max(limits.replicas-countIf(live, available), 0)
		var outdated []*agentsv1alpha1.Sandbox
		for _, sb := range live {
			if sb.Labels[agentsv1alpha1.LabelTemplateHash] != revision {
				outdated = append(outdated, sb)
			}
		}
		sortForDeletion(outdated)
		for _, sb := range outdated {
			if unavailable >= limits.maxUnavailable && available(sb) {
				break // replacing an available member now would exceed maxUnavailable
			}
			plan.outdated = append(plan.outdated, sb)
			live = slices.DeleteFunc(live, func(m *agentsv1alpha1.Sandbox) bool { return m.UID == sb.UID })
			if available(sb) {
				unavailable++
			}
		}
	}

	if surplus := len(live) - limits.replicas; surplus > 0 {
		sortForDeletion(live)
		plan.surplus = live[:surplus]
		return plan
	}
	if limits.templateRefused {
		return plan
	}
	plan.create = limits.replicas - len(live)
	if limits.creatingLimited {
		// Members created and not yet available use up the budget; the
		// pool handler syncs again as each becomes available.
		budget := max(limits.maxCreating-countIf(live, notAvailable), 0)
		plan.create = min(plan.create, budget)
	}
	return plan
}

// members lists the members of the set's pool (upgrade.IsPoolMember): a
// sandbox labelled claimed is left out even while the set still controls
// it, so that no rolling update or scale-down deletes a user's sandbox.
func (p *pool) members(set *agentsv1alpha1.SandboxSet) ([]*agentsv1alpha1.Sandbox, error) {
	all, err := p.sandboxes.Sandboxes(set.Namespace).List(labels.SelectorFromSet(labels.Set{agentsv1alpha1.LabelSandboxPool: set.Name}))
	if err != nil {
		return nil, fmt.Errorf("list members of SandboxSet %s/%s: %w", set.Namespace, set.Name, err)
	}
	var out []*agentsv1alpha1.Sandbox
	for _, sb := range all {
		if upgrade.IsPoolMember(sb, set) {
			out = append(out, sb)
		}
	}
	return out, nil
}

// create makes one new member on revision.
func (p *pool) create(ctx context.Context, e *expectation, set *agentsv1alpha1.SandboxSet, revision string) error {
	created, err := p.client.AgentsV1alpha1().Sandboxes(set.Namespace).Create(ctx, newMember(set, revision), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create a member of SandboxSet %s/%s: %w", set.Namespace, set.Name, err)
	}
	e.created = append(e.created, created.Name)
	return nil
}

// newMember is a new member of set on revision: its template, runtimes,
// persistent contents and volume claim templates, the pool's labels and
// the set as its controller.
func newMember(set *agentsv1alpha1.SandboxSet, revision string) *agentsv1alpha1.Sandbox {
	sb := &agentsv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: set.Name + "-",
			Namespace:    set.Namespace,
			Labels: map[string]string{
				agentsv1alpha1.LabelSandboxPool:     set.Name,
				agentsv1alpha1.LabelSandboxTemplate: set.Name,
				agentsv1alpha1.LabelSandboxClaimed:  "false",
				agentsv1alpha1.LabelTemplateHash:    revision,
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, agentsv1alpha1.SchemeGroupVersion.WithKind("SandboxSet"))},
		},
	}
	for k, v := range set.Spec.Template.Labels {
		if _, ours := sb.Labels[k]; !ours {
			sb.Labels[k] = v
		}
	}
	sb.Spec.Template = set.Spec.Template.DeepCopy()
	sb.Spec.Runtimes = slices.Clone(set.Spec.Runtimes)
	sb.Spec.PersistentContents = slices.Clone(set.Spec.PersistentContents)
	for _, claim := range set.Spec.VolumeClaimTemplates {
		sb.Spec.VolumeClaimTemplates = append(sb.Spec.VolumeClaimTemplates, *claim.DeepCopy())
	}
	return sb
}

// delete removes a member, with its UID and resourceVersion as
// preconditions: a sandbox claimed (or changed in any way) since the cache
// showed it is not deleted, and the pool looks again.
func (p *pool) delete(ctx context.Context, e *expectation, sb *agentsv1alpha1.Sandbox, why string) error {
	uid, rv := sb.UID, sb.ResourceVersion
	err := p.client.AgentsV1alpha1().Sandboxes(sb.Namespace).Delete(ctx, sb.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	switch {
	case apierrors.IsNotFound(err):
		return nil // gone already
	case apierrors.IsConflict(err):
		// Claimed or changed since the cache showed it: decide again on a
		// fresher view rather than count it deleted.
		return errChanged
	case err != nil:
		return fmt.Errorf("delete member %s/%s of its SandboxSet (%s): %w", sb.Namespace, sb.Name, why, err)
	}
	e.deleted = append(e.deleted, uid)
	klog.FromContext(ctx).Info("Deleted pool member", "sandbox", klog.KObj(sb), "uid", uid, "why", why)
	return nil
}

// errChanged says a member changed between the cache read and its delete;
// the sync ends and runs again shortly.
var errChanged = errors.New("a member changed since it was read")

// available reports whether a member serves: phase Running.
func available(sb *agentsv1alpha1.Sandbox) bool {
	return sb.Status.Phase == agentsv1alpha1.SandboxRunning
}

func notAvailable(sb *agentsv1alpha1.Sandbox) bool { return !available(sb) }

func countIf(sbs []*agentsv1alpha1.Sandbox, f func(*agentsv1alpha1.Sandbox) bool) int {
	n := 0
	for _, sb := range sbs {
		if f(sb) {
			n++
		}
	}
	return n
}

// sortForDeletion orders members by who goes first: not available before
// available, then the oldest, then by name.
func sortForDeletion(sbs []*agentsv1alpha1.Sandbox) {
	slices.SortStableFunc(sbs, func(a, b *agentsv1alpha1.Sandbox) int {
		if av, bv := available(a), available(b); av != bv {
			if !av {
				return -1
			}
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// PoolMaxUnavailable is how many of a set's replicas may be unavailable
// while its template rolls: spec.updateStrategy.maxUnavailable (default
// 20%, rounded up), at least 1. A value the CRD would refuse today (one
// stored before its rule) gives 1, the slowest pace, rather than none.
func PoolMaxUnavailable(set *agentsv1alpha1.SandboxSet) int {
	n, err := set.Spec.UpdateStrategy.MaxUnavailableOf(int(set.Spec.Replicas))
	if err != nil {
		return 1
	}
	return n
}

// poolScaleLimit is how many of a set's members may be created but not yet
// available at once: spec.scaleStrategy.maxUnavailable (a percentage of
// spec.replicas rounded up, at least 1); limited is false when it is unset.
// A value the CRD would refuse today gives 1, as in PoolMaxUnavailable.
func poolScaleLimit(set *agentsv1alpha1.SandboxSet) (n int, limited bool) {
	n, limited, err := set.Spec.ScaleStrategy.MaxUnavailableOf(int(set.Spec.Replicas))
	if err != nil {
		return 1, true
	}
	return n, limited
}

// slowStart calls create count times in batches of 1, 2, 4, ..., stopping
// after the first batch with an error; it returns how many succeeded.
func slowStart(count int, create func() error) (int, error) {
	done := 0
	for batch := 1; done < count; batch *= 2 {
		if batch > count-done {
			batch = count - done
		}
		for range batch {
			if err := create(); err != nil {
				return done, err
			}
			done++
		}
	}
	return done, nil
}

// poolHandler enqueues a SandboxSet for changes to it and to its members.
func poolHandler(enqueue func(string)) cache.ResourceEventHandler {
	key := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		switch o := obj.(type) {
		case *agentsv1alpha1.SandboxSet:
			enqueue(o.Namespace + "/" + o.Name)
		case *agentsv1alpha1.Sandbox:
			if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "SandboxSet" {
				enqueue(o.Namespace + "/" + ref.Name)
			} else if name := o.Labels[agentsv1alpha1.LabelSandboxPool]; name != "" {
				enqueue(o.Namespace + "/" + name) // claimed: the pool must refill
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: key, UpdateFunc: func(old, obj any) { key(old); key(obj) }, DeleteFunc: key}
}
