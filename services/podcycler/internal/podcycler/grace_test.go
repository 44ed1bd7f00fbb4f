package podcycler

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// A pod missing under UpgradePod is left to the handler for handlerGrace after the later
// of the stage's start and the moment this process first knew the old pod gone: its
// informer's delete, or else the first time it found the pod missing.
func TestLeaveToHandler(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC)
	started := now.Add(-4 * time.Second)
	upgrading := func(at time.Time) *agentsv1alpha1.Sandbox {
		return &agentsv1alpha1.Sandbox{Status: agentsv1alpha1.SandboxStatus{Conditions: []metav1.Condition{{
			Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse,
			Reason: agentsv1alpha1.UpgradingReasonUpgradePod, LastTransitionTime: metav1.NewTime(at),
		}}}}
	}
	tests := []struct {
		name   string
		sb     *agentsv1alpha1.Sandbox
		goneAt time.Time // zero: this process did not see the delete
		want   time.Duration
	}{
		{name: "stage started 4s ago, delete not seen: the pod is missing since now", sb: upgrading(started), want: 10 * time.Second},
		{name: "stage started long ago, delete not seen", sb: upgrading(now.Add(-time.Hour)), want: 10 * time.Second},
		{name: "old pod went after the start", sb: upgrading(started), goneAt: now.Add(-time.Second), want: 9 * time.Second},
		{name: "old pod went before the status showed the stage", sb: upgrading(started), goneAt: started.Add(-time.Second), want: 6 * time.Second},
		{name: "grace over", sb: upgrading(now.Add(-30 * time.Second)), goneAt: now.Add(-11 * time.Second), want: -time.Second},
		{name: "no Upgrading condition, no delete seen", sb: &agentsv1alpha1.Sandbox{}, want: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &cycler{handlerGrace: 10 * time.Second, now: func() time.Time { return now }}
			if !tt.goneAt.IsZero() {
				c.gone.now = func() time.Time { return tt.goneAt }
				c.gone.deleted("ns/a")
			}
			if got := c.leaveToHandler("ns/a", tt.sb); got != tt.want {
				t.Errorf("leaveToHandler = %s, want %s", got, tt.want)
			}
		})
	}
}

// With replicas, a sync can find the pod missing before its informer reports the delete
// (the store is updated before handlers run), while the stage began long before. The
// grace then counts from that first miss, so this replica does not race the handler in
// another one, and a delete reported later only moves the start later.
func TestLeaveToHandlerCountsFromTheFirstMiss(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	now := t0
	c := &cycler{handlerGrace: 10 * time.Second, now: func() time.Time { return now }}
	sb := &agentsv1alpha1.Sandbox{Status: agentsv1alpha1.SandboxStatus{Conditions: []metav1.Condition{{
		Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse,
		Reason: agentsv1alpha1.UpgradingReasonUpgradePod, LastTransitionTime: metav1.NewTime(t0.Add(-time.Minute)),
	}}}}
	steps := []struct {
		at         time.Duration
		deleteSeen bool
		want       time.Duration
	}{
		{at: 0, want: 10 * time.Second},
		{at: 4 * time.Second, want: 6 * time.Second},
		{at: 5 * time.Second, deleteSeen: true, want: 10 * time.Second},
		{at: 16 * time.Second, want: -time.Second},
	}
	for _, s := range steps {
		now = t0.Add(s.at)
		if s.deleteSeen {
			c.gone.now = func() time.Time { return now }
			c.gone.deleted("ns/a")
		}
		if got := c.leaveToHandler("ns/a", sb); got != s.want {
			t.Errorf("at +%s: leaveToHandler = %s, want %s", s.at, got, s.want)
		}
	}
}
