package upgrade

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// NothingSelected says why a selection of the ops's namespace has no
// candidate ("no sandbox needs this patch" when each already has the
// patched template, "no sandbox was selected" when none has, "no selected
// sandbox needs this patch" between), for the ops's NothingToUpdate condition: how many of the
// namespace's sandboxes each rule left out, in the order the rules are
// checked. A selector with a typo and a patch already applied both end with
// nothing to update; only the message tells them apart. Unless every sandbox
// left out already has the patched template (an ops applied twice), it says
// where to see each sandbox with why.
func NothingSelected(namespace string, s Selection) string {
	if len(s.Excluded) == 0 {
		return fmt.Sprintf("no sandbox was selected: namespace %s has no sandbox (an ops selects only in its own namespace)", namespace)
	}
	count := map[string]int{}
	phases := map[string]int{}
	var selector, claimedBy string
	for _, e := range s.Excluded {
		count[e.Reason]++
		switch e.Reason {
		case ExcludedSelector:
			selector = e.Detail
		case ExcludedStateFilter:
			phases[e.Detail]++
		case ExcludedOtherOps:
			claimedBy = e.Detail
		}
	}
	var parts []string
	// add counts one rule's sandboxes, with the verb in the singular (one) or plural (many).
	add := func(reason, one, many string) {
		switch n := count[reason]; {
		case n == 1:
			parts = append(parts, "1 "+one)
		case n > 1:
			parts = append(parts, fmt.Sprintf("%d %s", n, many))
		}
	}
	match := "match spec.selector (" + selector + ")"
	add(ExcludedSelector, "does not "+match, "do not "+match)
	add(ExcludedDeleting, "is being deleted", "are being deleted")
	add(ExcludedFinished, "has ended (phase Succeeded or Failed)", "have ended (phase Succeeded or Failed)")
	add(ExcludedPoolMember, "belongs to a SandboxSet, whose own rolling update upgrades it",
		"belong to a SandboxSet, whose own rolling update upgrades them")
	add(ExcludedOtherOps, "is claimed by another active ops ("+claimedBy+")", "are claimed by another active ops ("+claimedBy+")")
	add(ExcludedDirectUpgrade, "is in a direct upgrade of its own (spec.upgradePolicy): once it ends, delete this ops and create it again (applying it again changes nothing: it has ended)",
		"are in direct upgrades of their own (spec.upgradePolicy): once they end, delete this ops and create it again (applying it again changes nothing: it has ended)")
	filtered := "in a phase spec.stateFilter leaves out (" + phaseCounts(phases) + ")"
	add(ExcludedStateFilter, "is "+filtered, "are "+filtered)
	add(ExcludedNoNeed, "already has the patched template", "already have the patched template")

	of := fmt.Sprintf("of the %d sandboxes in namespace %s", len(s.Excluded), namespace)
	if len(s.Excluded) == 1 {
		of = "of the 1 sandbox in namespace " + namespace
	}
	switch count[ExcludedNoNeed] {
	case len(s.Excluded):
		return "no sandbox needs this patch: " + of + ", " + strings.Join(parts, ", ")
	case 0:
		// Rules left every one out (a typo in the selector, most often):
		// not a patch that is already there.
		return "no sandbox was selected: " + of + ", " + strings.Join(parts, ", ") + "; `kubectl molt plan -f <ops file>` lists each sandbox with why"
	}
	return "no selected sandbox needs this patch: " + of + ", " + strings.Join(parts, ", ") + "; `kubectl molt plan -f <ops file>` lists each sandbox with why"
}

// SelectsNothing reports whether s has no candidate and none of the
// namespace's sandboxes is left out only for already having the patched
// template: the selector and stateFilter match no sandbox at all, which is
// a mistake far more often than a finished job (an ops applied again is
// NothingToUpdate instead).
func (s Selection) SelectsNothing() bool {
	if s.Total() > 0 {
		return false
	}
	for _, e := range s.Excluded {
		if e.Reason == ExcludedNoNeed {
			return false
		}
	}
	return true
}

// LeftOutByStateFilter says, for an ops that completes, how many sandboxes
// match its spec.selector but are in a phase its spec.stateFilter leaves out
// ("" when none): a Paused sandbox left on the old template, or the sandboxes
// an edit of spec.stateFilter dropped while the ops ran, are not counted in
// its total, and "all N updated" alone would not say they are there.
func LeftOutByStateFilter(s Selection) string {
	phases := map[string]int{}
	n := 0
	for _, e := range s.Excluded {
		if e.Reason == ExcludedStateFilter {
			phases[e.Detail]++
			n++
		}
	}
	var out []string
	switch n {
	case 0:
	case 1:
		out = append(out, "1 sandbox that matches spec.selector is in a phase spec.stateFilter leaves out ("+phaseCounts(phases)+") and was not upgraded")
	default:
		out = append(out, fmt.Sprintf("%d sandboxes that match spec.selector are in a phase spec.stateFilter leaves out (%s) and were not upgraded", n, phaseCounts(phases)))
	}
	direct := 0
	for _, e := range s.Excluded {
		if e.Reason == ExcludedDirectUpgrade {
			direct++
		}
	}
	switch direct {
	case 0:
	case 1:
		out = append(out, "1 sandbox that matches spec.selector was in a direct upgrade of its own (spec.upgradePolicy) and was not upgraded by this ops: apply it again once that ends")
	default:
		out = append(out, fmt.Sprintf("%d sandboxes that match spec.selector were in direct upgrades of their own (spec.upgradePolicy) and were not upgraded by this ops: apply it again once those end", direct))
	}
	return strings.Join(out, "; ")
}

// SettleWait is how long after its creation a sandbox that the ops's
// stateFilter leaves out only for having no phase yet, or for being Pending,
// holds the ops's completion: it may be about to run (created with the ops,
// in one `kubectl apply`), and then the ops upgrades it.
const SettleWait = time.Minute

// settleSkew is how long after the ops a sandbox may be created and still
// count as applied with it (one `kubectl apply` of a directory creates them
// one by one).
const settleSkew = 10 * time.Second

// Starting returns, among the sandboxes s leaves out by the stateFilter of
// ops, those that may still be starting at now, by phase ("" for none yet),
// and how long until the last of them is no longer waited for: created no
// later than settleSkew after the ops (applied with it: sandboxes created
// later, as a platform creates them all day, never hold it), Pending and
// created less than SettleWait ago, or with no phase yet (statusagg has not
// given it one) and created, or seen since statusagg started (seenSince),
// less than SettleWait ago. Only when the stateFilter takes Running: no
// other filter would select them once they run.
func Starting(ops *agentsv1alpha1.SandboxUpdateOps, s Selection, now, seenSince time.Time) (phases map[string]int, n int, wait time.Duration) {
	phases = map[string]int{}
	if !slices.Contains(ops.Spec.StateFilter.EligiblePhases(), agentsv1alpha1.SandboxRunning) {
		return phases, 0, 0
	}
	latest := ops.CreationTimestamp.Add(settleSkew)
	for _, e := range s.Excluded {
		if e.Reason != ExcludedStateFilter || e.Sandbox.CreationTimestamp.After(latest) {
			continue
		}
		from := e.Sandbox.CreationTimestamp.Time
		switch e.Sandbox.Status.Phase {
		case "":
			if seenSince.After(from) {
				from = seenSince
			}
		case agentsv1alpha1.SandboxPending:
		default:
			continue
		}
		left := SettleWait - now.Sub(from)
		if left <= 0 {
			continue
		}
		wait = max(wait, left)
		phases[string(e.Sandbox.Status.Phase)]++
		n++
	}
	return phases, n, wait
}

// StartingMessage is the Progressing message of an ops that waits for n
// sandboxes still starting (Starting) before it completes.
func StartingMessage(n int, phases map[string]int) string {
	what := fmt.Sprintf("%d sandboxes that match spec.selector are", n)
	if n == 1 {
		what = "1 sandbox that matches spec.selector is"
	}
	return fmt.Sprintf("%s just created and not running yet (%s): waiting for them to start, at most %s after their creation, before deciding whether this ops upgrades them (spec.stateFilter picks by phase)",
		what, phaseCounts(phases), SettleWait)
}

// phaseCounts renders phase counts as "Paused: 2, Pending: 1", by phase name.
func phaseCounts(phases map[string]int) string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(phases)) {
		name := p
		if name == "" {
			name = "no phase yet"
		}
		out = append(out, fmt.Sprintf("%s: %d", name, phases[p]))
	}
	return strings.Join(out, ", ")
}
