package selector

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A pool deletes its dead members (phase Failed or Succeeded: a pod whose
// containers exited under restartPolicy Never or OnFailure) and replaces
// them, but not in a hot loop: once deadReplaced members of the current
// revision have been deleted dead within deadWindow, the next dead ones are
// kept, for the user to see why they died, and recorded on the set
// (upgrade.AnnotationMembersFailing), which statusagg shows as
// MembersFailing. A kept member still counts as a member, not available:
// it is not replaced, and it holds the rolling update's maxUnavailable. The
// pool replaces dead members again when the template changes (a new
// revision) or when no dead member of the revision is left (the user
// deleted them). Dead members of another revision are deleted as before.
//
// Members kept for upgrade.DeadMembersRetry are tried again: the pool
// replaces up to deadReplaced of them, then keeps the rest for as long
// again, so a cause that passed (an eviction, a registry that was down)
// does not hold the pool short for good, and one that did not costs
// deadReplaced replacements per period, not a hot loop.
//
// The count lives in memory; the record on the set does not. A selector
// that restarts while dead members are kept keeps them (the record says
// so) for a whole period from its restart; one that restarts before it
// recorded anything deletes at most deadReplaced dead members again before
// it keeps one.

const (
	// deadReplaced is how many dead members of one revision the pool
	// deletes within deadWindow before it keeps the next ones.
	deadReplaced = 3
	deadWindow   = upgrade.DeadMembersRetry
)

// deaths is what the pool remembers of a set's dead members deleted: the
// set (by UID), its revision, when each (by UID) was deleted, and since
// when this process has seen the set keep dead members (zero: it does not).
type deaths struct {
	uid       types.UID
	revision  string
	deleted   map[types.UID]time.Time
	heldSince time.Time
}

// recent is how many of d's deletions were within deadWindow of now; it
// forgets the older ones.
func (d deaths) recent(now time.Time) int {
	maps.DeleteFunc(d.deleted, func(_ types.UID, at time.Time) bool { return now.Sub(at) >= deadWindow })
	return len(d.deleted)
}

// dead reports whether sb's pod ended: phase Succeeded or Failed.
func dead(sb *agentsv1alpha1.Sandbox) bool {
	return sb.Status.Phase == agentsv1alpha1.SandboxSucceeded || sb.Status.Phase == agentsv1alpha1.SandboxFailed
}

// planDead decides which dead members a sync deletes and which it keeps:
// those of another revision than revision are deleted; those of revision
// are kept when held (the set records that the pool keeps them), else
// deleted while fewer than deadReplaced were deleted recently (recent),
// the oldest first, and the rest kept.
func planDead(deadMembers []*agentsv1alpha1.Sandbox, revision string, recent int, held bool) (remove, keep []*agentsv1alpha1.Sandbox) {
	deadMembers = slices.Clone(deadMembers)
	slices.SortStableFunc(deadMembers, func(a, b *agentsv1alpha1.Sandbox) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, sb := range deadMembers {
		switch {
		case sb.Labels[agentsv1alpha1.LabelTemplateHash] != revision:
			remove = append(remove, sb)
		case held || recent >= deadReplaced:
			keep = append(keep, sb)
		default:
			remove = append(remove, sb)
			recent++
		}
	}
	return remove, keep
}

// membersFailingMessage is the record's message for the dead members kept
// (at least one): the first by name, what its Ready condition says, and
// how many are kept. It changes only with the members kept.
func membersFailingMessage(keep []*agentsv1alpha1.Sandbox) string {
	first := slices.MinFunc(keep, func(a, b *agentsv1alpha1.Sandbox) int { return strings.Compare(a.Name, b.Name) })
	why := "phase " + string(first.Status.Phase)
	if ready := meta.FindStatusCondition(first.Status.Conditions, agentsv1alpha1.ConditionReady); ready != nil && ready.Status != metav1.ConditionTrue && ready.Message != "" {
		why = ready.Message
	}
	others := ""
	if len(keep) > 1 {
		others = fmt.Sprintf(" (%d dead members kept)", len(keep))
	}
	return agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("%d members of this revision died within %s and were replaced; the pool keeps the next dead ones: %s: %s%s",
		deadReplaced, deadWindow, first.Name, why, others))
}

// removeDead is step 5 of sync: it deletes the dead members planDead
// says to, counts those of revision, keeps the others, and records the
// members kept on the set (recordMembersFailing). It returns the members
// kept, which the rest of the sync counts as members not available.
func (p *pool) removeDead(ctx context.Context, e *expectation, set *agentsv1alpha1.SandboxSet, revision string, deadMembers []*agentsv1alpha1.Sandbox, now time.Time) ([]*agentsv1alpha1.Sandbox, error) {
	key := set.Namespace + "/" + set.Name
	p.mu.Lock()
	if p.deaths == nil {
		p.deaths = map[string]deaths{}
	}
	d, ok := p.deaths[key]
	if !ok || d.uid != set.UID || d.revision != revision {
		d = deaths{uid: set.UID, revision: revision, deleted: map[types.UID]time.Time{}}
		p.deaths[key] = d
	}
	recent := d.recent(now)
	held := upgrade.MembersFailing(set, revision) != ""
	var retryIn time.Duration
	switch {
	case !held:
		d.heldSince = time.Time{}
	case d.heldSince.IsZero():
		d.heldSince, retryIn = now, upgrade.DeadMembersRetry
	case now.Sub(d.heldSince) < upgrade.DeadMembersRetry:
		retryIn = upgrade.DeadMembersRetry - now.Sub(d.heldSince)
	default:
		// Kept for a whole period: try a few replacements again.
		held, recent, d.heldSince = false, 0, time.Time{}
		clear(d.deleted)
	}
	p.deaths[key] = d
	p.mu.Unlock()
	if retryIn > 0 {
		p.enqueueAfter(key, retryIn)
	}

	remove, keep := planDead(deadMembers, revision, recent, held)
	for _, sb := range remove {
		if err := p.delete(ctx, e, sb, "dead: phase "+string(sb.Status.Phase)); err != nil {
			return nil, err
		}
		if sb.Labels[agentsv1alpha1.LabelTemplateHash] == revision {
			p.mu.Lock()
			d.deleted[sb.UID] = now
			p.mu.Unlock()
		}
	}
	return keep, p.recordMembersFailing(ctx, set, revision, keep)
}

// recordMembersFailing keeps the set's upgrade.AnnotationMembersFailing in
// line with the dead members kept: their record while there are some, none
// once there are none (the user deleted them, or the template changed). A
// record removed resumes the pool: its count of deaths starts again.
func (p *pool) recordMembersFailing(ctx context.Context, set *agentsv1alpha1.SandboxSet, revision string, keep []*agentsv1alpha1.Sandbox) error {
	want := ""
	if len(keep) > 0 {
		want = upgrade.MembersFailingValue(revision, membersFailingMessage(keep))
	}
	if set.Annotations[upgrade.AnnotationMembersFailing] == want {
		return nil
	}
	logger := klog.FromContext(ctx)
	if want == "" && upgrade.MembersFailing(set, revision) != "" {
		key := set.Namespace + "/" + set.Name
		p.mu.Lock()
		delete(p.deaths, key)
		p.mu.Unlock()
		logger.Info("No dead member is kept any more; the pool replaces dead members again", "revision", revision)
	} else if upgrade.MembersFailing(set, revision) == "" {
		logger.Info("Members of the current revision keep dying; the pool keeps the dead ones instead of replacing them", "revision", revision, "kept", len(keep))
	}
	if err := p.record(ctx, set, upgrade.AnnotationMembersFailing, want); err != nil {
		return fmt.Errorf("record the failing members of SandboxSet %s/%s: %w", set.Namespace, set.Name, err)
	}
	return nil
}
