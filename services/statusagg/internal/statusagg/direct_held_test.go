package statusagg

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// The selector's record that a user's edit of a sandbox an ops left failed
// is not rolled out directly (upgrade.AnnotationDirectHeld) shows as the
// DirectUpgradeHeld condition and the status message, with one Warning
// Event, only while the sandbox is still failed by that ops at the
// generation the record is for; the failure's own message stays on the
// Upgrading condition.
func TestDirectHeldShowsWhileItApplies(t *testing.T) {
	const why = "the spec was changed (generation 3) after ...: set spec.upgradePolicy.type to CheckpointRestore"
	held := func(mutate func(sb *agentsv1alpha1.Sandbox)) *agentsv1alpha1.Sandbox {
		sb := withUpgrade(testSandbox(), agentsv1alpha1.UpgradingReasonUpgradePodFailed, "container main: ErrImagePull")
		sb.Annotations = map[string]string{upgrade.AnnotationDirectHeld: upgrade.DirectHeldValue(sb.Generation, why)}
		if mutate != nil {
			mutate(sb)
		}
		return sb
	}
	for _, tc := range []struct {
		name string
		sb   *agentsv1alpha1.Sandbox
		want string
	}{
		{"failed by an ops, recorded at this generation", held(nil), why},
		{"edited again since the record", held(func(sb *agentsv1alpha1.Sandbox) { sb.Generation++ }), ""},
		{"a new attempt started", held(func(sb *agentsv1alpha1.Sandbox) {
			recordTransition(&sb.Status.Conditions, transition{Attempt: "uid-2", To: agentsv1alpha1.UpgradingReasonPreUpgrade}, sb.Generation, sb.CreationTimestamp)
		}), ""},
		{"a direct attempt failed", held(func(sb *agentsv1alpha1.Sandbox) {
			recordTransition(&sb.Status.Conditions, transition{Attempt: upgrade.DirectAttempt("r1", 3), To: agentsv1alpha1.UpgradingReasonUpgradePodFailed}, sb.Generation, sb.CreationTimestamp)
		}), ""},
		{"no record", withUpgrade(testSandbox(), agentsv1alpha1.UpgradingReasonUpgradePodFailed, "container main: ErrImagePull"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := desiredSandboxStatus(tc.sb, testPod(false))
			c := meta.FindStatusCondition(st.Conditions, ConditionDirectUpgradeHeld)
			switch {
			case tc.want == "" && c != nil:
				t.Errorf("condition %s shown: %+v", ConditionDirectUpgradeHeld, c)
			case tc.want != "" && (c == nil || c.Message != tc.want || c.Reason != HeldReasonNotRolledOut):
				t.Errorf("condition %s = %+v; want True %s %q", ConditionDirectUpgradeHeld, c, HeldReasonNotRolledOut, tc.want)
			case tc.want != "" && st.Message != tc.want:
				t.Errorf("status.message %q; want the record %q", st.Message, tc.want)
			}
			if up := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionUpgrading); tc.want != "" && up.Message != "container main: ErrImagePull" {
				t.Errorf("Upgrading's message became %q; the failure's own words stay there", up.Message)
			}

			// The Event: once when the condition appears, not again while it stays.
			before := tc.sb.Status
			if news := directHeldNews(&before, &st); news != tc.want {
				t.Errorf("Event message %q; want %q", news, tc.want)
			}
			if news := directHeldNews(&st, &st); news != "" {
				t.Errorf("Event again for an unchanged record: %q", news)
			}
		})
	}

	// A condition written earlier goes once the record no longer applies.
	sb := held(nil)
	sb.Status = desiredSandboxStatus(sb, testPod(false))
	sb.Generation++
	if c := meta.FindStatusCondition(desiredSandboxStatus(sb, testPod(false)).Conditions, ConditionDirectUpgradeHeld); c != nil {
		t.Errorf("condition kept after the spec changed again: %+v", c)
	}
}
