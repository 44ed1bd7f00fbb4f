package selector

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// inflight remembers, per (sandbox, attempt), what this process did that
// the informer cache may not show yet: the sandbox's resourceVersion before
// it was labelled, and when `requested` was last published. Nothing here is
// the truth (the label is); it keeps a stale cache from admitting twice and
// paces republishing. A restarted process starts empty, so its first sync
// republishes for every admitted sandbox whose status does not show the
// attempt.
type inflight struct {
	mu sync.Mutex
	m  map[inflightKey]*admission
}

type inflightKey struct {
	sandbox types.UID
	attempt string
}

type admission struct {
	// fromRV is the sandbox's resourceVersion the admitting patch was
	// made against; while the cache still shows it, the cache is stale.
	fromRV      string
	publishedAt time.Time
}

func newInflight() *inflight { return &inflight{m: map[inflightKey]*admission{}} }

// admitted records that sb (read at its current resourceVersion) was
// labelled for attempt.
func (f *inflight) admitted(sb *agentsv1alpha1.Sandbox, attempt string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[inflightKey{sb.UID, attempt}] = &admission{fromRV: sb.ResourceVersion}
}

// published records that `requested` for (sandbox, attempt) was published at t.
func (f *inflight) published(uid types.UID, attempt string, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := inflightKey{uid, attempt}
	if a, ok := f.m[k]; ok {
		a.publishedAt = t
		return
	}
	f.m[k] = &admission{publishedAt: t}
}

// lastPublished returns when `requested` for (sandbox, attempt) was last
// published by this process.
func (f *inflight) lastPublished(uid types.UID, attempt string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.m[inflightKey{uid, attempt}]
	if !ok || a.publishedAt.IsZero() {
		return time.Time{}, false
	}
	return a.publishedAt, true
}

// unseen is true when sb was admitted for attempt by this process but the
// cached copy is still the version read before the label was written.
func (f *inflight) unseen(sb *agentsv1alpha1.Sandbox, attempt string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.m[inflightKey{sb.UID, attempt}]
	return ok && a.fromRV != "" && a.fromRV == sb.ResourceVersion
}

// forget drops one sandbox's record once its status shows the attempt.
func (f *inflight) forget(uid types.UID, attempt string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, inflightKey{uid, attempt})
}

// forgetAttempt drops every record of an attempt (its ops is going away).
func (f *inflight) forgetAttempt(attempt string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.m {
		if k.attempt == attempt {
			delete(f.m, k)
		}
	}
}

// countInflight returns sel with every not-started candidate for which
// unseen is true counted as updating: it was admitted, the cache just does
// not show it yet, and it uses budget. sel is not changed.
func countInflight(sel upgrade.Selection, unseen func(upgrade.Candidate) bool) upgrade.Selection {
	out := sel
	cloned := false // sel's candidates are left alone; cloned on the first change
	for i, c := range sel.Candidates {
		if c.State == upgrade.NotStarted && unseen(c) {
			if !cloned {
				out.Candidates, cloned = slices.Clone(sel.Candidates), true
			}
			out.Candidates[i].State = upgrade.Updating
			out.NotStarted--
			out.Updating++
		}
	}
	return out
}
