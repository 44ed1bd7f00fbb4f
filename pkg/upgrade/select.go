package upgrade

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// Candidate is a sandbox an ops counts, with where it stands.
type Candidate struct {
	Sandbox *agentsv1alpha1.Sandbox
	State   State
	// Resume is true for a sandbox left Upgrading with a failed reason by an
	// earlier attempt: it continues from the failed step.
	Resume bool
	// Refused is the API server's refusal of the write that would claim this
	// not-started sandbox (AnnotationClaimRefused): ToAdmit leaves it out.
	Refused string
}

// Selection is what an ops counts: the candidates in name order and the
// counters of its status.
type Selection struct {
	Candidates []Candidate
	// Excluded are the sandboxes of the ops's namespace that are not
	// candidates, in name order, each with why (kubectl molt plan shows
	// them; the services ignore them).
	Excluded   []Exclusion
	Updated    int
	Updating   int
	Failed     int
	NotStarted int
	// Refused counts the not-started candidates whose claim the API server
	// refused (Candidate.Refused): none of them can start.
	Refused int
	// MaxUnavailable is the resolved budget (at least 1).
	MaxUnavailable int
	// PodOf, set by a caller that knows the sandboxes' pods, tells whether
	// a failed sandbox still has its original pod (WithoutBackup); nil
	// when not known.
	PodOf PodOf
}

// Exclusion is a sandbox Select leaves out, and why.
type Exclusion struct {
	Sandbox *agentsv1alpha1.Sandbox
	// Reason is one of the Excluded* constants.
	Reason string
	// Detail says more: the other active ops's name, the phase, the pool.
	Detail string
}

// Why Select leaves a sandbox of the ops's namespace out, in the order the
// rules are checked.
const (
	// ExcludedSelector: the ops's selector does not match its labels.
	ExcludedSelector = "SelectorMismatch"
	// ExcludedDeleting: the sandbox is being deleted.
	ExcludedDeleting = "Deleting"
	// ExcludedFinished: the sandbox is in phase Succeeded or Failed.
	ExcludedFinished = "Finished"
	// ExcludedPoolMember: it is in a SandboxSet's warm pool (PoolOf: the
	// set controls it and it is not labelled claimed); the set's own
	// rolling update upgrades it.
	ExcludedPoolMember = "PoolMember"
	// ExcludedOtherOps: another active ops claims it.
	ExcludedOtherOps = "ClaimedByOtherOps"
	// ExcludedDirectUpgrade: a direct upgrade of its own (spec.upgradePolicy)
	// is in a stage; the ops does not claim it under that attempt.
	ExcludedDirectUpgrade = "DirectUpgrade"
	// ExcludedStateFilter: its phase is not in spec.stateFilter.
	ExcludedStateFilter = "StateFilter"
	// ExcludedNoNeed: its template already equals the patched one.
	ExcludedNoNeed = "NoNeedToUpdate"
)

// Total is every counted sandbox.
func (s Selection) Total() int { return len(s.Candidates) }

// Select applies API.md's selection rules to the sandboxes of the ops's
// namespace. otherActive reports whether an ops name (not this one) is an
// active ops of the namespace; a sandbox it claims is skipped.
func Select(ops *agentsv1alpha1.SandboxUpdateOps, sandboxes []*agentsv1alpha1.Sandbox, otherActive func(name string) bool) (Selection, error) {
	sel, err := LabelSelector(ops)
	if err != nil {
		return Selection{}, err
	}
	patch := ops.Spec.Patch.Raw
	digest := sha256.Sum256(patch) // noNeedToUpdate's memo key, once per Select
	phases := ops.Spec.StateFilter.EligiblePhases()
	refused := ClaimRefused(ops)
	out := Selection{Candidates: make([]Candidate, 0, len(sandboxes))}
	exclude := func(sb *agentsv1alpha1.Sandbox, reason, detail string) {
		out.Excluded = append(out.Excluded, Exclusion{Sandbox: sb, Reason: reason, Detail: detail})
	}
	for _, sb := range sandboxes {
		if sb.Namespace != ops.Namespace {
			continue
		}
		// A sandbox this ops claimed stays counted whatever its labels or
		// phase say now, until it is deleted (rule 13): the claim itself
		// removes upgrade-failed (a selector on it would otherwise let every
		// claimed sandbox out of the budget), and a user may relabel a
		// sandbox mid-upgrade.
		claimedBy := sb.Labels[agentsv1alpha1.LabelUpdateOps]
		claimed := ClaimedByOps(sb, ops.Name, ops.UID)
		if _, ok := UnlabelledClaim(sb, ops.Name, ops.UID); ok {
			// Its label was removed, its attempt shown: counted by it (the
			// selector puts the label back while it is in a stage).
			out.Candidates = append(out.Candidates, Candidate{Sandbox: sb, State: StateFor(sb, ops.Name, ops.UID)})
			continue
		}
		if !claimed && !sel.Matches(labels.Set(sb.Labels)) {
			exclude(sb, ExcludedSelector, sel.String())
			continue
		}
		if sb.DeletionTimestamp != nil {
			// One this ops upgraded stays counted as updated while it is
			// being deleted (a finalizer, a foreground delete): once it is
			// gone, statusagg's SandboxesDeleted record counts it instead.
			if st := StateFor(sb, ops.Name, ops.UID); claimed && st == Updated {
				out.Candidates = append(out.Candidates, Candidate{Sandbox: sb, State: st})
				continue
			}
			exclude(sb, ExcludedDeleting, "")
			continue
		}
		if claimed { // counted until it is deleted, whatever else changed
			out.Candidates = append(out.Candidates, Candidate{Sandbox: sb, State: StateFor(sb, ops.Name, ops.UID)})
			continue
		}
		if sb.Status.Phase == agentsv1alpha1.SandboxSucceeded || sb.Status.Phase == agentsv1alpha1.SandboxFailed {
			exclude(sb, ExcludedFinished, string(sb.Status.Phase))
			continue
		}
		if pool := PoolOf(sb); pool != nil {
			exclude(sb, ExcludedPoolMember, pool.Name)
			continue
		}
		if claimedBy != "" && claimedBy != ops.Name && otherActive != nil && otherActive(claimedBy) {
			exclude(sb, ExcludedOtherOps, claimedBy)
			continue
		}
		if attempt := CurrentAttempt(sb); strings.HasPrefix(attempt, DirectAttemptPrefix) {
			if reason, ok := ReasonFor(sb, attempt); ok && InProgress(reason) {
				exclude(sb, ExcludedDirectUpgrade, reason)
				continue
			}
		}
		resume := IsResumable(sb)
		if !resume {
			if !slices.Contains(phases, sb.Status.Phase) {
				exclude(sb, ExcludedStateFilter, string(sb.Status.Phase))
				continue
			}
			if noNeedToUpdate(sb, patch, digest) {
				exclude(sb, ExcludedNoNeed, "")
				continue
			}
		}
		out.Candidates = append(out.Candidates, Candidate{Sandbox: sb, State: NotStarted, Resume: resume, Refused: refused[sb.Name]})
	}
	slices.SortFunc(out.Candidates, func(a, b Candidate) int { return strings.Compare(a.Sandbox.Name, b.Sandbox.Name) })
	slices.SortFunc(out.Excluded, func(a, b Exclusion) int { return strings.Compare(a.Sandbox.Name, b.Sandbox.Name) })
	for _, c := range out.Candidates {
		switch c.State {
		case Updated:
			out.Updated++
		case Updating:
			out.Updating++
		case Failed:
			out.Failed++
		default:
			out.NotStarted++
			if c.Refused != "" {
				out.Refused++
			}
		}
	}
	out.MaxUnavailable, err = ops.Spec.UpdateStrategy.MaxUnavailableOf(out.Total())
	if err != nil {
		return Selection{}, fmt.Errorf("spec.updateStrategy.maxUnavailable: %w", err)
	}
	return out, nil
}

// ToAdmit returns the not-started candidates that fit in the budget now:
// failed ones use budget too, so a broken patch does not spread.
func (s Selection) ToAdmit() []Candidate {
	room := s.MaxUnavailable - s.Updating - s.Failed
	var out []Candidate
	for _, c := range s.Candidates {
		if room <= 0 {
			break
		}
		if c.State == NotStarted && c.Refused == "" {
			out = append(out, c)
			room--
		}
	}
	return out
}

// Stuck is true when nothing is upgrading and every sandbox not started is
// one whose claim the API server refused: none can start, and waiting
// changes nothing.
func (s Selection) Stuck() bool {
	return s.Updating == 0 && s.NotStarted > 0 && s.Refused == s.NotStarted
}

// BudgetExhausted is true when failures alone fill the budget and nothing is
// upgrading: no further sandbox can start.
func (s Selection) BudgetExhausted() bool {
	return s.Failed > 0 && s.Updating == 0 && s.Failed >= s.MaxUnavailable && s.NotStarted > 0
}

// LabelSelector converts the ops selector; nil selects everything.
func LabelSelector(ops *agentsv1alpha1.SandboxUpdateOps) (labels.Selector, error) {
	if ops.Spec.Selector == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ops.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("spec.selector: %w", err)
	}
	return sel, nil
}

// IsResumable is true for a sandbox left in phase Upgrading with a failed
// Upgrading reason.
func IsResumable(sb *agentsv1alpha1.Sandbox) bool {
	if sb.Status.Phase != agentsv1alpha1.SandboxUpgrading {
		return false
	}
	for _, c := range sb.Status.Conditions {
		if c.Type == agentsv1alpha1.ConditionUpgrading {
			return agentsv1alpha1.IsUpgradingFailedReason(c.Reason)
		}
	}
	return false
}

// noNeedToUpdate is true when the patched template equals the current one
// (digest is the patch's sha256).
// A patch that cannot be applied is not "no need": the sandbox is selected
// and fails visibly in the patcher.
//
// The answer is remembered per sandbox version and patch (noNeedMemo): Select
// runs on every change of an ops's sandboxes, and applying the patch to every
// not-started sandbox each time made its cost grow with the square of their
// number.
func noNeedToUpdate(sb *agentsv1alpha1.Sandbox, patch []byte, digest [sha256.Size]byte) bool {
	key := noNeedKey{uid: sb.UID, resourceVersion: sb.ResourceVersion, patch: digest}
	if key.uid == "" || key.resourceVersion == "" {
		return computeNoNeed(sb, patch)
	}
	if v, ok := noNeedMemo.Load(key.uid); ok && v.(noNeedEntry).key == key {
		return v.(noNeedEntry).noNeed
	}
	noNeed := computeNoNeed(sb, patch)
	if noNeedMemoSize.Add(1) > noNeedMemoMax {
		noNeedMemo.Clear() // sandboxes long deleted: start again
		noNeedMemoSize.Store(0)
	}
	noNeedMemo.Store(key.uid, noNeedEntry{key: key, noNeed: noNeed})
	return noNeed
}

// noNeedMemo maps a sandbox UID to its last noNeedToUpdate answer.
var (
	noNeedMemo     sync.Map
	noNeedMemoSize atomic.Int64
)

const noNeedMemoMax = 1 << 17

type noNeedKey struct {
	uid             types.UID
	resourceVersion string
	patch           [sha256.Size]byte
}

type noNeedEntry struct {
	key    noNeedKey
	noNeed bool
}

// DeletionWaitsFor says whether an ops being deleted must wait for sb, which it
// claimed, before it lets go of it (and of its finalizer): sb is not being deleted
// itself, and its attempt of ops is in a stage, or not recorded yet although its
// template already has the patch (the patcher wrote it; released then, it would keep
// the new template on its old pod with no record of an upgrade). The selector's
// release and statusagg's Deleting condition both ask this.
func DeletionWaitsFor(ops *agentsv1alpha1.SandboxUpdateOps, sb *agentsv1alpha1.Sandbox) bool {
	if sb.DeletionTimestamp != nil || sb.Namespace != ops.Namespace || !ClaimedByOps(sb, ops.Name, ops.UID) {
		return false
	}
	reason, recorded := ReasonFor(sb, string(ops.UID))
	if recorded {
		return InProgress(reason)
	}
	return !IsResumable(sb) && TemplatePatched(sb, ops.Spec.Patch.Raw)
}

// TemplatePatched reports whether sb's template already equals itself with patch
// applied (what Select calls NoNeedToUpdate, uncached).
func TemplatePatched(sb *agentsv1alpha1.Sandbox, patch []byte) bool { return computeNoNeed(sb, patch) }

func computeNoNeed(sb *agentsv1alpha1.Sandbox, patch []byte) bool {
	cur := sb.Spec.Template
	if cur == nil {
		cur = &corev1.PodTemplateSpec{}
	}
	patched, err := ApplyPatch(cur, patch)
	if err != nil {
		return false
	}
	return equality.Semantic.DeepEqual(cur, patched)
}

// ActiveOps returns the active ops of one namespace's ops: of those neither
// finished (Completed or Failed) nor deleted past their finalizer
// (holdsNamespace), one that has started
// (its patch check passed, so it may have claimed sandboxes) before one
// that has not, then the oldest, then by name. Creation times have whole
// seconds: without the first rule, an ops created in the same second as a
// running one, with a name that sorts first, would take over and a second
// batch would start in the namespace. Others wait in Pending until it ends.
func ActiveOps(list []*agentsv1alpha1.SandboxUpdateOps) *agentsv1alpha1.SandboxUpdateOps {
	started := func(o *agentsv1alpha1.SandboxUpdateOps) bool {
		v, ok := PatchVerdict(o)
		return ok && v == PatchCheckOK
	}
	var active *agentsv1alpha1.SandboxUpdateOps
	for _, o := range list {
		if !holdsNamespace(o) {
			continue
		}
		switch {
		case active == nil:
			active = o
		case started(o) != started(active):
			if started(o) {
				active = o
			}
		case o.CreationTimestamp.Before(&active.CreationTimestamp) ||
			(o.CreationTimestamp.Equal(&active.CreationTimestamp) && o.Name < active.Name):
			active = o
		}
	}
	return active
}

// HoldsNamespace reports whether o may be the active ops of its namespace
// (holdsNamespace).
func HoldsNamespace(o *agentsv1alpha1.SandboxUpdateOps) bool { return holdsNamespace(o) }

// holdsNamespace reports whether o may be the active ops of its namespace: not finished,
// and not being deleted, or being deleted but still holding the selector's finalizer,
// which it keeps until every sandbox it started has ended its attempt. A next ops that
// started meanwhile would run its batch beside that tail, over one budget.
func holdsNamespace(o *agentsv1alpha1.SandboxUpdateOps) bool {
	if IsFinished(o) {
		return false
	}
	return o.DeletionTimestamp == nil || slices.Contains(o.Finalizers, agentsv1alpha1.FinalizerSandboxUpdateOpsProtection)
}

// IsFinished is true once an ops has reached Completed or Failed.
func IsFinished(o *agentsv1alpha1.SandboxUpdateOps) bool { return FinalPhase(o.Status.Phase) }

// FinalPhase reports whether phase ends an ops (Completed, Failed).
func FinalPhase(phase agentsv1alpha1.SandboxUpdateOpsPhase) bool {
	return phase == agentsv1alpha1.SandboxUpdateOpsCompleted || phase == agentsv1alpha1.SandboxUpdateOpsFailed
}

// FailedAttempt returns the attempt and failed reason of a sandbox left in
// phase Upgrading with a failed reason (ok false when it is not resumable).
// A new attempt continues it from ResumeAt.
func FailedAttempt(sb *agentsv1alpha1.Sandbox) (attempt, reason string, ok bool) {
	if !IsResumable(sb) {
		return "", "", false
	}
	attempt = CurrentAttempt(sb)
	reason, _ = ReasonFor(sb, attempt)
	return attempt, reason, reason != ""
}

// OtherActive returns the otherActive argument of Select for ops named self
// among all ops of its namespace: a claiming ops counts when it exists, is
// not finished and is not being deleted.
func OtherActive(all []*agentsv1alpha1.SandboxUpdateOps, self string) func(name string) bool {
	return func(name string) bool {
		if name == self {
			return false
		}
		for _, o := range all {
			if o.Name == name {
				return holdsNamespace(o)
			}
		}
		return false
	}
}
