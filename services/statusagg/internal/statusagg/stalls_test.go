package statusagg

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// An ops says which of its sandboxes are past their stage's deadline (a
// walk's stopped hookrunner showed nowhere but in the sandbox's Events),
// re-driven or with their input still undelivered, names the service to
// check, and stops saying it once they moved on or the ops ended.
func TestStalledStagesAreToldOnTheOps(t *testing.T) {
	var b stallBoard
	stalls := map[string][]stall{"ns/up": {
		{sandbox: "box-1", stage: agentsv1alpha1.UpgradingReasonPreUpgrade, redrive: 1, of: 2},
		{sandbox: "box-0", stage: agentsv1alpha1.UpgradingReasonPostUpgrade, queuedAt: "hookrunner-post"},
	}}
	if changed := b.set(stalls); !slices.Equal(changed, []string{"ns/up"}) {
		t.Fatalf("set: changed %v, want ns/up", changed)
	}
	if changed := b.set(map[string][]stall{"ns/up": slices.Clone(b.of("ns/up"))}); len(changed) != 0 {
		t.Errorf("set again with the same stalls: changed %v, want none (no ops sync, no write)", changed)
	}

	st := agentsv1alpha1.SandboxUpdateOpsStatus{Phase: agentsv1alpha1.SandboxUpdateOpsUpdating}
	withStalls(&st, b.of("ns/up"), 3)
	c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionStagesStalled)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != agentsv1alpha1.StagesStalledReasonRedriven || c.ObservedGeneration != 3 {
		t.Fatalf("StagesStalled = %+v, want True, Redriven, generation 3", c)
	}
	for _, want := range []string{
		"2 sandboxes made no progress past their stage's deadline",
		"box-0 in PostUpgrade (its input not yet delivered by consumer hookrunner-post), box-1 in PreUpgrade (re-driven 1 of 2)",
		"Check that hookrunner and patcher run and reach NATS",
	} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q does not say %q", c.Message, want)
		}
	}

	if changed := b.set(map[string][]stall{}); !slices.Equal(changed, []string{"ns/up"}) {
		t.Errorf("set with none: changed %v, want ns/up (its condition goes)", changed)
	}
	withStalls(&st, b.of("ns/up"), 3)
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionStagesStalled); c != nil {
		t.Errorf("StagesStalled = %+v once none is stalled, want none", c)
	}
	withStalls(&st, stalls["ns/up"], 3)
	st.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
	withStalls(&st, stalls["ns/up"], 3)
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionStagesStalled); c != nil {
		t.Errorf("StagesStalled = %+v on a Failed ops, want none", c)
	}
}
