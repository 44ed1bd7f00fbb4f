package upgrade

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// AnnotationClaimRefused is the SandboxUpdateOps annotation the selector
// writes when the API server refuses for good (Forbidden, Invalid: an
// admission policy or webhook on sandboxes, the selector's RBAC) the write
// that claims a sandbox for the ops: a JSON object of sandbox name → the
// server's words. Those sandboxes are not tried again by this ops (Selection
// leaves them out of ToAdmit, counted as not started); statusagg shows them
// (ConditionClaimRefused) and ends the ops Failed once nothing else can
// start, instead of leaving it Updating for ever. `kubectl molt retry` does
// not copy it: the retry tries them again.
const AnnotationClaimRefused = "molt.dev/claim-refused"

// maxClaimRefused bounds the sandboxes AnnotationClaimRefused names (so that
// a policy refusing a whole fleet keeps the annotation well under the
// object's size limit); the server's words are kept for the first
// maxClaimRefusedWords, the others hold claimRefusedElided.
const (
	maxClaimRefused      = 1000
	maxClaimRefusedWords = 20
	claimRefusedElided   = "…"
)

// ClaimRefused reads AnnotationClaimRefused (nil without one, or unreadable).
func ClaimRefused(ops *agentsv1alpha1.SandboxUpdateOps) map[string]string {
	v, ok := ops.Annotations[AnnotationClaimRefused]
	if !ok {
		return nil
	}
	var m map[string]string
	if json.Unmarshal([]byte(v), &m) != nil {
		return nil
	}
	return m
}

// WithClaimRefused returns AnnotationClaimRefused's value with refused added
// to what ops holds, and whether it adds anything. Every refused sandbox is
// named (Selection.Stuck needs them all), its words past the first
// maxClaimRefusedWords left out; past maxClaimRefused names the rest are
// not recorded (they are tried again at each sync, and refused again).
func WithClaimRefused(ops *agentsv1alpha1.SandboxUpdateOps, refused map[string]string) (string, bool) {
	m := ClaimRefused(ops)
	if m == nil {
		m = map[string]string{}
	}
	added := false
	for _, name := range slices.Sorted(maps.Keys(refused)) {
		if _, ok := m[name]; ok || len(m) >= maxClaimRefused {
			continue
		}
		m[name] = refused[name]
		if len(m) > maxClaimRefusedWords {
			m[name] = claimRefusedElided
		}
		added = true
	}
	raw, _ := json.Marshal(m)
	return string(raw), added
}

// ClaimRefusedNote says which sandboxes the API server refused to let ops
// claim, and what to do: for the ClaimRefused condition.
func ClaimRefusedNote(namespace, name string, refused map[string]string) string {
	var parts, more []string
	for _, sb := range slices.Sorted(maps.Keys(refused)) {
		if refused[sb] == claimRefusedElided {
			more = append(more, sb)
			continue
		}
		parts = append(parts, sb+": "+refused[sb])
	}
	if len(more) > 0 {
		named := strings.Join(more[:min(len(more), 10)], ", ")
		if len(more) > 10 {
			named += ", …"
		}
		parts = append(parts, fmt.Sprintf("and %d more (%s)", len(more), named))
	}
	return agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("the API server refused the write that claims %s for this ops (its label %s), so %s not upgraded by it and nothing of %s was changed: "+
		"fix the cause (an admission policy or webhook on sandboxes, the selector's RBAC), then `kubectl molt retry %s -n %s` once this ops has ended. %s",
		Sandboxes(len(refused)), agentsv1alpha1.LabelUpdateOps, Agree(len(refused), "it is", "they are"), Agree(len(refused), "its", "theirs"), name, namespace, strings.Join(parts, "; ")))
}
