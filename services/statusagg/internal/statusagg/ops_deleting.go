package statusagg

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// An ops being deleted: why it is not gone yet (the Deleting condition).

// releaseOverdue is how long the selector's release of an ops being deleted
// (the label off every sandbox, then its finalizer off the ops) may make no
// progress, once no sandbox is in an attempt of the ops, before Deleting says
// it is pending: each step normally takes well under a second.
const releaseOverdue = 30 * time.Second

// sayWhyDeletionWaits writes, on an ops being deleted, why it is not gone yet
// (deletingCondition), with an Event when the reason first appears, and its
// counts as its sandboxes finish (recountDeleting). Only a change is
// written.
func (s *server) sayWhyDeletionWaits(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sandboxes []*agentsv1alpha1.Sandbox) error {
	key := ops.Namespace + "/" + ops.Name
	cond, recheck := deletingCondition(ops, sandboxes, time.Now(), &s.releases)
	if recheck > 0 {
		s.opsCtl.EnqueueAfter(key, recheck)
	}
	want := ops.Status.DeepCopy()
	if cond != nil {
		setCondition(&want.Conditions, *cond)
	}
	recountDeleting(want, ops, sandboxes)
	if equality.Semantic.DeepEqual(&ops.Status, want) {
		return nil
	}
	was := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionDeleting)
	upd := ops.DeepCopy()
	upd.Status = *want
	written, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return nil // changed or gone meanwhile: the informer brings it back
	case err != nil:
		return fmt.Errorf("update status of ops %s/%s being deleted: %w", ops.Namespace, ops.Name, err)
	}
	if cond != nil && (was == nil || was.Reason != cond.Reason) {
		eventType := corev1.EventTypeNormal
		if cond.Reason == agentsv1alpha1.DeletingReasonReleasePending {
			eventType = corev1.EventTypeWarning
		}
		s.recorder.Event(written, eventType, cond.Reason, cond.Message)
	}
	return nil
}

// recountDeleting brings the counts of st, the status of ops being deleted,
// up to date with sandboxes: the sandboxes it started still finish their
// attempts (every stage drives them) while the selector's release waits for
// them, or while no selector runs, and a count left as it was would say "1
// updating" of one that succeeded since. Updated and failed only grow (the
// release takes the ops's label off, after which a sandbox is no longer told
// apart as its); replicas stays. Nothing changes when the selector cannot be
// read (the count it had stays).
func recountDeleting(st *agentsv1alpha1.SandboxUpdateOpsStatus, ops *agentsv1alpha1.SandboxUpdateOps, sandboxes []*agentsv1alpha1.Sandbox) {
	sel, err := upgrade.Select(ops, sandboxes, func(string) bool { return false })
	if err != nil {
		return
	}
	st.UpdatingReplicas = int32(sel.Updating)
	st.UpdatedReplicas = max(st.UpdatedReplicas, int32(sel.Updated))
	st.FailedReplicas = max(st.FailedReplicas, int32(sel.Failed))
	if p := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionProgressing); p != nil && p.Status == metav1.ConditionTrue &&
		(p.Reason == agentsv1alpha1.ProgressingReasonUpdating || p.Reason == agentsv1alpha1.ProgressingReasonPaused) {
		// Its counts, as the ops's own sync wrote them, would go on saying
		// "1 updating" of a sandbox that has finished.
		p.Message = fmt.Sprintf("%d of %d sandboxes updated, %d updating, %d failed; the ops is being deleted: no sandbox is started, those it started finish their attempt (condition Deleting says what its deletion waits for)",
			st.UpdatedReplicas, st.Replicas, st.UpdatingReplicas, st.FailedReplicas)
	}
}

// deletingCondition is the Deleting condition of ops, being deleted, at now:
//   - WaitingForSandboxes naming the sandboxes it claimed whose attempt is
//     still in a stage (the selector keeps the ops, through its finalizer,
//     until they end);
//   - else, once what the selector has left to release (sandboxes that
//     still carry the ops's label, then its finalizer) has not changed for
//     releaseOverdue (releases tells since when), ReleasePending naming it;
//   - else none, with how long until ReleasePending may be due (0: never).
func deletingCondition(ops *agentsv1alpha1.SandboxUpdateOps, sandboxes []*agentsv1alpha1.Sandbox, now time.Time, releases *releaseWatch) (*metav1.Condition, time.Duration) {
	key := ops.Namespace + "/" + ops.Name
	cond := &metav1.Condition{Type: agentsv1alpha1.ConditionDeleting, Status: metav1.ConditionTrue, ObservedGeneration: ops.Generation}
	if finishing := deletionWaitsFor(ops, sandboxes); len(finishing) > 0 {
		releases.forget(key)
		cond.Reason, cond.Message = agentsv1alpha1.DeletingReasonWaitingForSandboxes, deletionWaitMessage(finishing)
		return cond, 0
	}
	var labelled []string
	for _, sb := range sandboxes {
		if sb.Labels[agentsv1alpha1.LabelUpdateOps] == ops.Name && sb.DeletionTimestamp == nil {
			labelled = append(labelled, sb.Name)
		}
	}
	finalizer := slices.Contains(ops.Finalizers, agentsv1alpha1.FinalizerSandboxUpdateOpsProtection)
	if len(labelled) == 0 && !finalizer {
		return nil, 0
	}
	stalled := now.Sub(releases.since(key, ops.UID, len(labelled), now))
	if stalled < releaseOverdue {
		was := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionDeleting)
		switch {
		case was != nil && was.Reason == agentsv1alpha1.DeletingReasonReleasePending:
			// Said pending, and it moves again: no longer pending.
			cond.Reason, cond.Message = agentsv1alpha1.DeletingReasonReleasing, "being deleted: the selector releases its sandboxes again; the ops goes once none carries its label"
			return cond, releaseOverdue - stalled
		case was != nil && was.Reason == agentsv1alpha1.DeletingReasonWaitingForSandboxes:
			// The sandboxes it waited for ended their attempt: saying it
			// still waits for them would be stale.
			cond.Reason, cond.Message = agentsv1alpha1.DeletingReasonReleasing, "being deleted: no sandbox is in an attempt of it any more; the selector releases its sandboxes, and the ops goes once none carries its label"
			return cond, releaseOverdue - stalled
		}
		return nil, releaseOverdue - stalled
	}
	slices.Sort(labelled)
	what := fmt.Sprintf("molt's finalizer %s is still on it", agentsv1alpha1.FinalizerSandboxUpdateOpsProtection)
	if len(labelled) > 0 {
		verb := "carry"
		if len(labelled) == 1 {
			verb = "carries"
		}
		what = fmt.Sprintf("%s still %s its label %s=%s", namedCount(labelled), verb, agentsv1alpha1.LabelUpdateOps, ops.Name)
	}
	cond.Reason = agentsv1alpha1.DeletingReasonReleasePending
	cond.Message = agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("being deleted, and no sandbox is in an attempt of it, but %s, unchanged for %s or more: the selector removes the label from each sandbox, then the finalizer. Is a selector running (%s)? If one is, its log says why the API server refuses the write (an admission policy or webhook on sandboxes or ops, its RBAC): fix that, and the delete goes on by itself",
		what, releaseOverdue, releases.leaseHint()))
	return cond, 0
}

// releaseWatch remembers, per ops being deleted, how many of its sandboxes
// the selector had left to release when this process last looked, and since
// when that number holds: a release that makes progress is not pending.
type releaseWatch struct {
	mu sync.Mutex
	m  map[string]releaseLeft
	// leaseNamespace is where molt's Leases are (statusagg's
	// --leader-election-namespace, which the selector shares), "" when not
	// known.
	leaseNamespace string
}

// leaseHint says where to see whether a selector runs.
func (w *releaseWatch) leaseHint() string {
	if w.leaseNamespace == "" {
		return "its Lease molt-selector, in the namespace molt runs in, names the leader and when it last renewed; a renewal older than the lease duration (15s) means none runs"
	}
	return fmt.Sprintf("`kubectl get lease molt-selector -n %s -o jsonpath='{.spec.holderIdentity} {.spec.renewTime}'` names the leader and when it last renewed: a leader that died keeps its name there, so a renewal older than the lease duration (15s) means none runs", w.leaseNamespace)
}

type releaseLeft struct {
	uid   types.UID
	left  int
	since time.Time
}

// since returns since when key's ops (of uid) has had left sandboxes to
// release, as far as this process has seen: now, when the number changed.
func (w *releaseWatch) since(key string, uid types.UID, left int, now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.m[key]; ok && cur.uid == uid && cur.left == left {
		return cur.since
	}
	if w.m == nil {
		w.m = map[string]releaseLeft{}
	}
	w.m[key] = releaseLeft{uid: uid, left: left, since: now}
	return now
}

func (w *releaseWatch) forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}

// namedCount is "1 sandbox (a)" or "N sandboxes (a, b, … and M more)".
func namedCount(names []string) string {
	if len(names) == 1 {
		return "1 sandbox (" + names[0] + ")"
	}
	return fmt.Sprintf("%d sandboxes (%s)", len(names), namedList(names))
}

// deletionWaitsFor returns, in name order, the sandboxes claimed by ops whose attempt
// of ops is in a stage: those selector's release waits for.
func deletionWaitsFor(ops *agentsv1alpha1.SandboxUpdateOps, sandboxes []*agentsv1alpha1.Sandbox) []string {
	var out []string
	for _, sb := range sandboxes {
		if upgrade.DeletionWaitsFor(ops, sb) {
			out = append(out, sb.Name)
		}
	}
	slices.Sort(out)
	return out
}

// deletionWaitMessage is the Deleting condition's message for the sandboxes named.
func deletionWaitMessage(finishing []string) string {
	named := finishing
	more := ""
	if len(named) > maxNamedFailures {
		named, more = named[:maxNamedFailures], fmt.Sprintf(" and %d more", len(finishing)-maxNamedFailures)
	}
	count := "1 sandbox to end the attempt it is in"
	if len(finishing) != 1 {
		count = fmt.Sprintf("%d sandboxes to end the attempts they are in", len(finishing))
	}
	return fmt.Sprintf("being deleted: waiting for %s (%s%s); each ends by its stage's deadline, Succeeded or in a failed reason a new ops resumes; then the ops label and the finalizer are removed. Sandboxes not started are not touched",
		count, strings.Join(named, ", "), more)
}
