package statusagg

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the current code")

// golden compares v, as YAML, with testdata/name.golden.yaml.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name+".golden.yaml")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run: go test ./services/statusagg/internal/statusagg/ -run Golden -update)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s changed (rerun with -update if intended):\n%s\nwant:\n%s", name, got, want)
	}
}

// fixedTimes gives every condition one transition time, so the rendered
// status is the same at every run.
func fixedTimes(st *agentsv1alpha1.SandboxStatus) {
	at := metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	for i := range st.Conditions {
		st.Conditions[i].LastTransitionTime = at
	}
}

// TestSandboxStatusGolden pins the status `kubectl get sbx -o yaml` shows in
// each situation a user meets: running, upgrading in a stage, failed with a
// message, succeeded, paused, woken for an upgrade.
func TestSandboxStatusGolden(t *testing.T) {
	paused := testSandbox()
	paused.Spec.Paused = true
	for _, tc := range []struct {
		name string
		st   agentsv1alpha1.SandboxStatus
	}{
		{"running", desiredSandboxStatus(testSandbox(), testPod(true))},
		{"upgrading-preupgrade", desiredSandboxStatus(withUpgrade(testSandbox(), agentsv1alpha1.UpgradingReasonPreUpgrade, ""), testPod(true))},
		{"failed-upgradepod", desiredSandboxStatus(withUpgrade(testSandbox(), agentsv1alpha1.UpgradingReasonUpgradePodFailed,
			"container main: ErrImagePull - pull access denied"), testPod(false))},
		{"succeeded", desiredSandboxStatus(withUpgrade(testSandbox(), agentsv1alpha1.UpgradingReasonSucceeded, ""), testPod(true))},
		{"paused", desiredSandboxStatus(paused, nil)},
		{"woken-resuming", desiredSandboxStatus(withUpgrade(paused.DeepCopy(), agentsv1alpha1.UpgradingReasonResuming, ""), nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fixedTimes(&tc.st)
			golden(t, "sandbox-status-"+tc.name, tc.st)
		})
	}
}

// TestSandboxSetStatusGolden pins a SandboxSet's status halfway through a
// rolling update: 4 members, 2 on the new revision (one of them not Running
// yet), 1 old one not Running.
func TestSandboxSetStatusGolden(t *testing.T) {
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "ns", Generation: 2}}
	set.Spec.Replicas = 4
	set.Spec.Template = testSandbox().Spec.Template
	rev := desiredSetStatus(set, nil).UpdateRevision
	member := func(revision string, phase agentsv1alpha1.SandboxPhase) *agentsv1alpha1.Sandbox {
		sb := testSandbox()
		sb.Labels = map[string]string{agentsv1alpha1.LabelTemplateHash: revision}
		sb.Status.Phase = phase
		return sb
	}
	st := desiredSetStatus(set, []*agentsv1alpha1.Sandbox{
		member(rev, agentsv1alpha1.SandboxRunning), member(rev, agentsv1alpha1.SandboxPending),
		member("old", agentsv1alpha1.SandboxRunning), member("old", agentsv1alpha1.SandboxPending),
	})
	if st.Replicas != 4 || st.AvailableReplicas != 2 || st.UpdatedReplicas != 2 || st.UpdatedAvailableReplicas != 1 {
		t.Errorf("counters %+v, want 4 members, 2 available, 2 updated, 1 updated and available", st)
	}
	golden(t, "sandboxset-status-rolling", st)
}

// The selector's refusal of the current template shows as TemplateRefused=True with its
// message; a refusal of an earlier revision does not; once the selector drops it, the
// condition turns False.
func TestSandboxSetStatusShowsATemplateRefusal(t *testing.T) {
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "ns", Generation: 3}}
	set.Spec.Template = testSandbox().Spec.Template
	rev := desiredSetStatus(set, nil).UpdateRevision
	set.Annotations = map[string]string{upgrade.AnnotationTemplateCheck: upgrade.TemplateCheckValue("older", "refused before")}
	if c := meta.FindStatusCondition(desiredSetStatus(set, nil).Conditions, ConditionTemplateRefused); c != nil {
		t.Fatalf("an earlier revision's refusal shows: %+v", c)
	}
	set.Annotations[upgrade.AnnotationTemplateCheck] = upgrade.TemplateCheckValue(rev, "a pod from spec.template would not run: exceeded quota")
	set.Status = desiredSetStatus(set, nil)
	c := meta.FindStatusCondition(set.Status.Conditions, ConditionTemplateRefused)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != TemplateReasonPodRefused || c.Message != "a pod from spec.template would not run: exceeded quota" {
		t.Fatalf("TemplateRefused = %+v, want True with the selector's message", c)
	}
	delete(set.Annotations, upgrade.AnnotationTemplateCheck)
	c = meta.FindStatusCondition(desiredSetStatus(set, nil).Conditions, ConditionTemplateRefused)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != TemplateReasonAccepted {
		t.Fatalf("TemplateRefused after the refusal was dropped = %+v, want False/Accepted", c)
	}
}
