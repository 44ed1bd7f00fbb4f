package statusagg

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A sandbox's start or success is recounted at the slow pace only while its
// ops has more sandboxes to start than one round of its budget: then it
// cannot change the ops's phase.
func TestRecountDelay(t *testing.T) {
	s := &server{opsInterval: time.Second}
	ops := func(name string, phase agentsv1alpha1.SandboxUpdateOpsPhase) *agentsv1alpha1.SandboxUpdateOps {
		return &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Status: agentsv1alpha1.SandboxUpdateOpsStatus{Phase: phase}}
	}
	s.opsTails.set("ns/waiting", upgrade.Selection{NotStarted: 21, MaxUnavailable: 10})
	s.opsTails.set("ns/tail", upgrade.Selection{NotStarted: 10, MaxUnavailable: 10})
	s.opsTails.set("ns/pending", upgrade.Selection{NotStarted: 100, MaxUnavailable: 10})
	s.opsTails.set("ns/catching-up", upgrade.Selection{NotStarted: 11, MaxUnavailable: 10})
	s.opsTails.started("ns/catching-up") // one more started since its recount
	s.opsTails.started("ns/unknown")     // not recounted: stays unknown
	for _, tc := range []struct {
		name   string
		ops    *agentsv1alpha1.SandboxUpdateOps
		urgent bool
		want   time.Duration
	}{
		{"sandboxes still wait", ops("waiting", agentsv1alpha1.SandboxUpdateOpsUpdating), false, time.Second},
		{"sandboxes still wait, a failure", ops("waiting", agentsv1alpha1.SandboxUpdateOpsUpdating), true, opsRecountDelay},
		{"the last round", ops("tail", agentsv1alpha1.SandboxUpdateOpsUpdating), false, opsRecountDelay},
		{"the last round, counting starts since the recount", ops("catching-up", agentsv1alpha1.SandboxUpdateOpsUpdating), false, opsRecountDelay},
		{"not recounted since start", ops("unknown", agentsv1alpha1.SandboxUpdateOpsUpdating), false, opsRecountDelay},
		{"not running yet", ops("pending", agentsv1alpha1.SandboxUpdateOpsPending), false, opsRecountDelay},
		{"paused", func() *agentsv1alpha1.SandboxUpdateOps {
			o := ops("waiting", agentsv1alpha1.SandboxUpdateOpsUpdating)
			o.Spec.Paused = true
			return o
		}(), false, opsRecountDelay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.recountDelay(tc.ops, tc.urgent); got != tc.want {
				t.Fatalf("recountDelay = %s, want %s", got, tc.want)
			}
		})
	}
	s.opsTails.forget("ns/waiting")
	if got := s.recountDelay(ops("waiting", agentsv1alpha1.SandboxUpdateOpsUpdating), false); got != opsRecountDelay {
		t.Fatalf("recountDelay of a forgotten ops = %s, want %s", got, opsRecountDelay)
	}
}
