package podcycler

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// A pod missing under UpgradePod is left to the handler for handlerGrace after the later
// of the stage's start and the old pod's delete seen by this process.
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
		// overdue: any wait ≤ 0 is right (nothing says when the stage began).
		overdue bool
	}{
		{name: "stage started 4s ago, delete not seen", sb: upgrading(started), want: 6 * time.Second},
		{name: "old pod went after the start", sb: upgrading(started), goneAt: now.Add(-time.Second), want: 9 * time.Second},
		{name: "old pod went before the status showed the stage", sb: upgrading(started), goneAt: started.Add(-time.Second), want: 6 * time.Second},
		{name: "grace over", sb: upgrading(now.Add(-30 * time.Second)), goneAt: now.Add(-11 * time.Second), want: -time.Second},
		{name: "no Upgrading condition, no delete seen", sb: &agentsv1alpha1.Sandbox{}, overdue: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &cycler{handlerGrace: 10 * time.Second, now: func() time.Time { return now }}
			if !tt.goneAt.IsZero() {
				c.gone.now = func() time.Time { return tt.goneAt }
				c.gone.deleted("ns/a")
			}
			got := c.leaveToHandler("ns/a", tt.sb)
			if tt.overdue {
				if got > 0 {
					t.Errorf("leaveToHandler = %s, want ≤ 0", got)
				}
				return
			}
			if got != tt.want {
				t.Errorf("leaveToHandler = %s, want %s", got, tt.want)
			}
		})
	}
}
