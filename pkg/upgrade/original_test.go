package upgrade

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

func TestOriginalTemplate(t *testing.T) {
	const v0 = `{"spec":{"containers":[{"name":"sandbox","image":"v0"}]}}`
	// sandbox: status shows attempt in reason ("" for none); the original
	// template is kept for keptFor ("" for none); annotations holds the rest.
	sandbox := func(attempt, reason, keptFor string, annotations ...string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Annotations: map[string]string{}}}
		if attempt != "" {
			sb.Status.Conditions = []metav1.Condition{
				{Type: ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: attempt},
				{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
			}
		}
		if keptFor != "" {
			sb.Annotations[AnnotationOriginalTemplate] = v0
			sb.Annotations[AnnotationOriginalTemplateFor] = keptFor
		}
		for i := 0; i+1 < len(annotations); i += 2 {
			sb.Annotations[annotations[i]] = annotations[i+1]
		}
		return sb
	}
	claimed := func(sb *agentsv1alpha1.Sandbox, ops, attempt string) *agentsv1alpha1.Sandbox {
		sb.Labels[agentsv1alpha1.LabelUpdateOps] = ops
		sb.Annotations[AnnotationClaim] = ClaimValue(ops, attempt)
		return sb
	}
	const (
		wake   = agentsv1alpha1.UpgradingReasonResuming
		woken  = agentsv1alpha1.UpgradingReasonResumeSucceed
		pre    = agentsv1alpha1.UpgradingReasonPreUpgrade
		preF   = agentsv1alpha1.UpgradingReasonPreUpgradeFailed
		cpF    = agentsv1alpha1.UpgradingReasonCheckpointFailed
		podF   = agentsv1alpha1.UpgradingReasonUpgradePodFailed
		podUp  = agentsv1alpha1.UpgradingReasonUpgradePod
		succ   = agentsv1alpha1.UpgradingReasonSucceeded
		resume = AnnotationResumes
	)
	for _, tc := range []struct {
		name string
		sb   *agentsv1alpha1.Sandbox
		want bool
	}{
		{"nothing kept", sandbox("a1", preF, ""), false},
		{"kept for the attempt in PreUpgrade", sandbox("a1", pre, "a1"), true},
		{"kept for the attempt waking the sandbox", sandbox("a1", wake, "a1"), true},
		{"kept for the attempt woken", sandbox("a1", woken, "a1"), true},
		{"kept for the attempt failed in PreUpgrade", sandbox("a1", preF, "a1"), true},
		{"the attempt got past PreUpgrade: its backup is taken", sandbox("a1", podUp, "a1"), false},
		{"the attempt failed after its backup", sandbox("a1", podF, "a1"), false},
		{"the attempt failed in Checkpointing, after its backup", sandbox("a1", cpF, "a1"), false},
		{"the attempt succeeded", sandbox("a1", succ, "a1"), false},
		{"kept for an older attempt than the one shown", sandbox("a2", preF, "a1"), false},
		// Admitted, not shown in the status yet.
		{"a resume of the attempt failed in PreUpgrade, not shown yet", sandbox("a1", preF, "a2", resume, ResumesValue("a2", "a1", preF)), true},
		{"a resume of another attempt", sandbox("a1", preF, "a2", resume, ResumesValue("a2", "a0", preF)), false},
		{"a resume of an attempt that failed after its backup", sandbox("a1", podF, "a2", resume, ResumesValue("a2", "a1", podF)), false},
		// Its stages own the pod; a missing one is UpgradePod's to build.
		{"a fresh attempt, claimed, not shown yet", claimed(sandbox("a0", succ, "a1"), "up", "a1"), false},
		{"a fresh attempt, claimed, nothing shown yet", claimed(sandbox("", "", "a1"), "up", "a1"), false},
		{"a fresh attempt released before it was shown", sandbox("a0", succ, "a1"), false},
		{"a fresh attempt, the claim is another's", claimed(sandbox("a0", succ, "a1"), "up", "a9"), false},
		{"an unreadable copy", sandbox("a1", pre, "a1", AnnotationOriginalTemplate, "{"), false},
		{"the attempt named, no copy", sandbox("a1", pre, "", AnnotationOriginalTemplateFor, "a1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl, ok := OriginalTemplate(tc.sb)
			if ok != tc.want {
				t.Fatalf("OriginalTemplate holds = %v, want %v", ok, tc.want)
			}
			if ok && tpl.Spec.Containers[0].Image != "v0" {
				t.Fatalf("OriginalTemplate = %+v, want the kept v0", tpl)
			}
			got, original := PodTemplate(tc.sb)
			if original != tc.want || (!original && got != tc.sb.Spec.Template) {
				t.Fatalf("PodTemplate = %v, %v; want the kept one only when it holds", got, original)
			}
		})
	}
}

func TestBeforeBackup(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   bool
	}{
		{agentsv1alpha1.UpgradingReasonResuming, true},
		{agentsv1alpha1.UpgradingReasonResumeSucceed, true},
		{agentsv1alpha1.UpgradingReasonPreUpgrade, true},
		{agentsv1alpha1.UpgradingReasonPreUpgradeFailed, true},
		{agentsv1alpha1.UpgradingReasonCheckpointing, false},
		{agentsv1alpha1.UpgradingReasonCheckpointFailed, false},
		{agentsv1alpha1.UpgradingReasonUpgradePod, false},
		{agentsv1alpha1.UpgradingReasonUpgradePodFailed, false},
		{agentsv1alpha1.UpgradingReasonPostUpgrade, false},
		{agentsv1alpha1.UpgradingReasonPostUpgradeFailed, false},
		{agentsv1alpha1.UpgradingReasonSucceeded, false},
		{"", false},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			if got := BeforeBackup(tc.reason); got != tc.want {
				t.Errorf("BeforeBackup(%q) = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}

func TestPatchedForFresh(t *testing.T) {
	sandbox := func(annotations ...string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		for i := 0; i+1 < len(annotations); i += 2 {
			sb.Annotations[annotations[i]] = annotations[i+1]
		}
		return sb
	}
	const (
		keptFor = AnnotationOriginalTemplateFor
		preF    = agentsv1alpha1.UpgradingReasonPreUpgradeFailed
	)
	for _, tc := range []struct {
		name    string
		sb      *agentsv1alpha1.Sandbox
		attempt string
		want    bool
	}{
		{"the patcher kept the template for this fresh attempt", sandbox(keptFor, "a1"), "a1", true},
		{"nothing kept", sandbox(), "a1", false},
		{"kept for another attempt", sandbox(keptFor, "a0"), "a1", false},
		{"the selector moved the mark to this resume", sandbox(keptFor, "a2", AnnotationResumes, ResumesValue("a2", "a1", preF)), "a2", false},
		{"a resume of another attempt is recorded", sandbox(keptFor, "a2", AnnotationResumes, ResumesValue("a9", "a1", preF)), "a2", true},
		{"no attempt", sandbox(keptFor, ""), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PatchedForFresh(tc.sb, tc.attempt); got != tc.want {
				t.Fatalf("PatchedForFresh(%v, %q) = %v, want %v", tc.sb.Annotations, tc.attempt, got, tc.want)
			}
		})
	}
}
