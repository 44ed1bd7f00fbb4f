package upgrade

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

func TestWokenForUpgradeAndKeepAwake(t *testing.T) {
	sandbox := func(paused, labelled, trigger bool, reason string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Annotations: map[string]string{}}}
		sb.Spec.Paused = paused
		if labelled {
			sb.Labels[agentsv1alpha1.LabelUpdateOps] = "ops"
		}
		if trigger {
			sb.Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger] = "true"
		}
		if reason != "" {
			sb.Status.Conditions = []metav1.Condition{
				{Type: ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: "a1"},
				{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
			}
		}
		return sb
	}
	for _, tc := range []struct {
		name        string
		sb          *agentsv1alpha1.Sandbox
		woken, keep bool
	}{
		{"paused, admitted, no attempt recorded yet", sandbox(true, true, true, ""), true, true},
		{"paused, admitted, resuming", sandbox(true, true, true, agentsv1alpha1.UpgradingReasonResuming), true, true},
		{"paused, admitted, in UpgradePod", sandbox(true, true, true, agentsv1alpha1.UpgradingReasonUpgradePod), true, true},
		{"paused, admitted, succeeded", sandbox(true, true, true, agentsv1alpha1.UpgradingReasonSucceeded), true, false},
		{"paused, admitted, failed", sandbox(true, true, true, agentsv1alpha1.UpgradingReasonPreUpgradeFailed), true, false},
		{"unpaused meanwhile", sandbox(false, true, true, agentsv1alpha1.UpgradingReasonPreUpgrade), false, false},
		{"unpaused meanwhile, in UpgradePod", sandbox(false, true, false, agentsv1alpha1.UpgradingReasonUpgradePod), false, false},
		{"paused, ops deleted (no label), in PreUpgrade", sandbox(true, false, true, agentsv1alpha1.UpgradingReasonPreUpgrade), false, true},
		{"paused, ops deleted (no label), failed", sandbox(true, false, true, agentsv1alpha1.UpgradingReasonPreUpgradeFailed), false, false},
		{"paused, never admitted", sandbox(true, false, false, ""), false, false},
		{"paused by its user in PreUpgrade", sandbox(true, true, false, agentsv1alpha1.UpgradingReasonPreUpgrade), false, true},
		{"paused by its user in UpgradePod", sandbox(true, true, false, agentsv1alpha1.UpgradingReasonUpgradePod), false, true},
		{"paused by its user in PostUpgrade of a direct attempt (no ops label)", sandbox(true, false, false, agentsv1alpha1.UpgradingReasonPostUpgrade), false, true},
		{"paused by its user, claimed, attempt not recorded yet", sandbox(true, true, false, ""), false, false},
		{"paused by its user, succeeded", sandbox(true, true, false, agentsv1alpha1.UpgradingReasonSucceeded), false, false},
		{"paused by its user, failed in UpgradePod", sandbox(true, true, false, agentsv1alpha1.UpgradingReasonUpgradePodFailed), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WokenForUpgrade(tc.sb); got != tc.woken {
				t.Errorf("WokenForUpgrade = %v, want %v", got, tc.woken)
			}
			if got := KeepAwake(tc.sb); got != tc.keep {
				t.Errorf("KeepAwake = %v, want %v", got, tc.keep)
			}
			// Admitted to be woken: the label and the trigger, paused or not.
			admitted := tc.sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" && tc.sb.Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger] == "true"
			if got := AdmittedToWake(tc.sb); got != admitted {
				t.Errorf("AdmittedToWake = %v, want %v", got, admitted)
			}
		})
	}
}

func TestWakeAtAdmission(t *testing.T) {
	resumed := func(sb *agentsv1alpha1.Sandbox, attempt, failed, reason string) *agentsv1alpha1.Sandbox {
		sb.Annotations = map[string]string{AnnotationResumes: ResumesValue(attempt, failed, reason)}
		return sb
	}
	kept := func(sb *agentsv1alpha1.Sandbox, attempt string) *agentsv1alpha1.Sandbox {
		sb.Annotations[AnnotationOriginalTemplate] = `{"spec":{"containers":[{"name":"sandbox","image":"v0"}]}}`
		sb.Annotations[AnnotationOriginalTemplateFor] = attempt
		return sb
	}
	sandbox := func(paused bool, phase agentsv1alpha1.SandboxPhase, failed string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{}
		sb.Spec.Paused = paused
		sb.Status.Phase = phase
		if failed != "" {
			sb.Status.Phase = agentsv1alpha1.SandboxUpgrading // as statusagg shows a failed attempt
			sb.Status.Conditions = []metav1.Condition{
				{Type: ConditionAttempt, Status: metav1.ConditionTrue, Reason: failed, Message: "a1"},
				{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: failed},
			}
		}
		return sb
	}
	for _, tc := range []struct {
		name string
		sb   *agentsv1alpha1.Sandbox
		want bool
	}{
		{"paused, never upgraded", sandbox(true, agentsv1alpha1.SandboxPaused, ""), true},
		{"running", sandbox(false, agentsv1alpha1.SandboxRunning, ""), false},
		{"paused, its preUpgrade failed: no backup was taken", sandbox(true, "", agentsv1alpha1.UpgradingReasonPreUpgradeFailed), true},
		{"paused, its checkpoint failed after the backup: not woken, so the backup is not taken again from an emptied workspace", sandbox(true, "", agentsv1alpha1.UpgradingReasonCheckpointFailed), false},
		// The backup of the failed attempt is the good copy: the resume
		// builds the new pod and restores it; a woken pod would be backed
		// up over it.
		{"paused, failed in UpgradePod", sandbox(true, "", agentsv1alpha1.UpgradingReasonUpgradePodFailed), false},
		{"paused, failed in PostUpgrade", sandbox(true, "", agentsv1alpha1.UpgradingReasonPostUpgradeFailed), false},
		{"running, its preUpgrade failed: the old pod still runs", sandbox(false, "", agentsv1alpha1.UpgradingReasonPreUpgradeFailed), false},
		// a1 failed in PreUpgrade resuming a0, which may have replaced the pod
		// (the record keeps only a1's reason): a0's backup may be the good one.
		{"paused, its preUpgrade failed resuming an earlier failure", resumed(sandbox(true, "", agentsv1alpha1.UpgradingReasonPreUpgradeFailed), "a1", "a0", agentsv1alpha1.UpgradingReasonUpgradePodFailed), false},
		// A chain whose every earlier attempt failed before its backup (the
		// wake-up failed twice): nothing was backed up or replaced, so the
		// resume wakes it and backs it up. Before, any chain was not woken,
		// and the resume went on at UpgradePod: postUpgrade restored an
		// older backup over the workspace.
		{"paused, its wake-up failed twice", resumed(sandbox(true, "", agentsv1alpha1.UpgradingReasonPreUpgradeFailed), "a1", "a0", agentsv1alpha1.UpgradingReasonPreUpgradeFailed), true},
		{"paused, its wake-up failed twice, then a resume of it was abandoned", resumed(sandbox(true, "", agentsv1alpha1.UpgradingReasonPreUpgradeFailed), "a2", "a1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed), false},
		// ...unless the template from before the chain's first patch is still
		// kept for a1: no attempt of the chain got past PreUpgrade.
		{"paused, its preUpgrade failed resuming an earlier one, the original template kept", kept(resumed(sandbox(true, "", agentsv1alpha1.UpgradingReasonPreUpgradeFailed), "a1", "a0", agentsv1alpha1.UpgradingReasonPreUpgradeFailed), "a1"), true},
		{"paused, its preUpgrade failed resuming an earlier one, the original template kept for another attempt", kept(resumed(sandbox(true, "", agentsv1alpha1.UpgradingReasonPreUpgradeFailed), "a1", "a0", agentsv1alpha1.UpgradingReasonUpgradePodFailed), "a0"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WakeAtAdmission(tc.sb); got != tc.want {
				t.Errorf("WakeAtAdmission = %v, want %v", got, tc.want)
			}
		})
	}
}
