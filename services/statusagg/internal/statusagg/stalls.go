package statusagg

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// stall is a sandbox of an ops past its stage's deadline at the watchdog's last
// check: re-driven, or with the stage's input still undelivered at its consumer.
type stall struct {
	sandbox, stage string
	redrive, of    int    // the last re-drive (1 for the first), of how many before it fails
	queuedAt       string // the consumer where its input waits undelivered ("" when re-driven)
}

// stallBoard holds, by ops key (namespace/name), the ops's stalled sandboxes as
// of the watchdog's last check, for the ops's StagesStalled condition: a
// stopped hookrunner otherwise shows in `kubectl molt status` only as a stage
// that lasts (a walk found it said nowhere but in the sandbox's Events).
type stallBoard struct {
	mu  sync.Mutex
	now map[string][]stall
}

// set replaces the board with stalls (sorted by sandbox) and returns the ops
// keys whose stalls changed.
func (b *stallBoard) set(stalls map[string][]stall) []string {
	for _, list := range stalls {
		slices.SortFunc(list, func(a, b stall) int { return strings.Compare(a.sandbox, b.sandbox) })
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var changed []string
	for key, list := range stalls {
		if !slices.Equal(list, b.now[key]) {
			changed = append(changed, key)
		}
	}
	for key := range b.now {
		if _, ok := stalls[key]; !ok {
			changed = append(changed, key)
		}
	}
	b.now = stalls
	slices.Sort(changed)
	return changed
}

// of returns the stalls of the ops with key.
func (b *stallBoard) of(key string) []stall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.now[key])
}

// maxStallsNamed bounds the sandboxes the condition names.
const maxStallsNamed = 10

// withStalls sets StagesStalled on st, the status of an ops that has not ended,
// while some of its sandboxes are stalled, and removes it otherwise.
func withStalls(st *agentsv1alpha1.SandboxUpdateOpsStatus, stalls []stall, generation int64) {
	if len(stalls) == 0 || upgrade.FinalPhase(st.Phase) {
		meta.RemoveStatusCondition(&st.Conditions, agentsv1alpha1.ConditionStagesStalled)
		return
	}
	named := make([]string, 0, min(len(stalls), maxStallsNamed))
	services := map[string]bool{}
	for i, s := range stalls {
		for _, service := range stalledServices(s) {
			services[service] = true
		}
		switch {
		case i >= maxStallsNamed:
		case s.queuedAt != "":
			named = append(named, fmt.Sprintf("%s in %s (its input not yet delivered by consumer %s)", s.sandbox, s.stage, s.queuedAt))
		default:
			named = append(named, fmt.Sprintf("%s in %s (re-driven %d of %d)", s.sandbox, s.stage, s.redrive, s.of))
		}
	}
	if more := len(stalls) - len(named); more > 0 {
		named = append(named, fmt.Sprintf("and %d more", more))
	}
	setCondition(&st.Conditions, metav1.Condition{
		Type: agentsv1alpha1.ConditionStagesStalled, Status: metav1.ConditionTrue,
		Reason: agentsv1alpha1.StagesStalledReasonRedriven, ObservedGeneration: generation,
		Message: fmt.Sprintf("%s made no progress past %s stage's deadline: %s. Nothing is lost: an input not yet delivered waits for its consumer (a backlog, or a service that takes nothing), one delivered and not answered is published again, and a stage that stalls past its last re-drive fails, saying what did not arrive. Check that %s %s and %s NATS (`make status` locally; on a cluster `kubectl get pods -n molt-system`, its /readyz and its log); a re-driven sandbox's StageStalled Event names the NATS consumer to look at",
			upgrade.Sandboxes(len(stalls)), upgrade.Agree(len(stalls), "its", "their"), strings.Join(named, ", "),
			andList(slices.Sorted(maps.Keys(services))), upgrade.Agree(len(services), "runs", "run"), upgrade.Agree(len(services), "reaches", "reach")),
	})
}

// stalledServices are the services one of whose stops would leave s stalled:
// the one behind the consumer its input waits at, or those taking its stage's
// inputs (stageHandledBy names the consumers).
func stalledServices(s stall) []string {
	if s.queuedAt != "" {
		return []string{strings.TrimSuffix(s.queuedAt, "-post")}
	}
	switch s.stage {
	case agentsv1alpha1.UpgradingReasonResuming, agentsv1alpha1.UpgradingReasonResumeSucceed:
		return []string{"patcher"}
	case agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonCheckpointing:
		return []string{"podcycler"}
	case agentsv1alpha1.UpgradingReasonPostUpgrade:
		return []string{"hookrunner"}
	}
	return []string{"patcher", "hookrunner"}
}

// andList joins words as "a", "a and b", "a, b and c".
func andList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}
