package upgrade

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// Only a resumed sandbox whose failure says its workspace is kept in a
// checkpoint (the old pod gone) is left behind, and only by an ops that is
// not a CheckpointRestore.
func TestCheckpointLeftBehind(t *testing.T) {
	failed := func(name, reason, message string) Candidate {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}}
		sb.Status.Conditions = []metav1.Condition{{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason, Message: message}}
		return Candidate{Sandbox: sb, State: NotStarted, Resume: true}
	}
	kept := WithNote("pod a not Ready after 5m0s", CheckpointKeptNote("ns", "a", "ckpt-a"))
	notResumed := failed("d", agentsv1alpha1.UpgradingReasonUpgradePodFailed, kept)
	notResumed.Resume = false
	sel := Selection{Candidates: []Candidate{
		failed("a", agentsv1alpha1.UpgradingReasonUpgradePodFailed, kept),
		failed("b", agentsv1alpha1.UpgradingReasonUpgradePodFailed, "pod b not Ready after 5m0s"),
		failed("c", agentsv1alpha1.UpgradingReasonCheckpointFailed, "the checkpointer failed: the old pod keeps running"),
		notResumed,
	}}
	recreate := &agentsv1alpha1.SandboxUpdateOps{}
	if got := CheckpointLeftBehind(recreate, sel); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Recreate: %v, want [a]", got)
	}
	cr := &agentsv1alpha1.SandboxUpdateOps{}
	cr.Spec.UpdateStrategy.Type = agentsv1alpha1.UpgradeTypeCheckpointRestore
	if got := CheckpointLeftBehind(cr, sel); len(got) != 0 {
		t.Errorf("CheckpointRestore: %v, want none", got)
	}
}

// A PostUpgradeFailed of a CheckpointRestore attempt is left behind by a
// Recreate ops whose resume would build the pod again (review): the pod the
// checkpoint was restored into, or is yet to be, holds the workspace, and a
// rebuild under Recreate starts from an empty filesystem. A resume that
// only runs postUpgrade again on that pod (Ready, restored, of the patched
// template) loses nothing, nor does one of a Recreate attempt.
func TestCheckpointLeftBehindAfterPostUpgradeFailed(t *testing.T) {
	tpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v2"}}}}
	revision, err := Revision(tpl)
	if err != nil {
		t.Fatal(err)
	}
	box := func(name, strategy string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
			Annotations: map[string]string{AnnotationUpgradeStrategy: "a1 " + strategy}}}
		sb.Spec.Template = tpl.DeepCopy()
		sb.Status.Phase = agentsv1alpha1.SandboxUpgrading
		sb.Status.Conditions = []metav1.Condition{
			{Type: ConditionAttempt, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.UpgradingReasonPostUpgradeFailed, Message: "a1"},
			{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: agentsv1alpha1.UpgradingReasonPostUpgradeFailed, Message: "hook exited 1"},
		}
		return sb
	}
	pod := func(restored, ready bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x",
			Labels:      map[string]string{agentsv1alpha1.LabelPodTemplateHash: revision},
			Annotations: map[string]string{AnnotationPodAttempt: "a1", AnnotationRestoreFrom: "ckpt-1"}}}
		if restored {
			p.Annotations[AnnotationRestored] = "ckpt-1"
		}
		if ready {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		return p
	}
	cr, rc := string(agentsv1alpha1.UpgradeTypeCheckpointRestore), string(agentsv1alpha1.UpgradeTypeRecreate)
	pods := map[string]*corev1.Pod{
		"restored": pod(true, true), "not-restored": pod(false, true), "not-ready": pod(true, false),
		"recreate": pod(true, false),
	}
	var sel Selection
	for _, sb := range []*agentsv1alpha1.Sandbox{box("restored", cr), box("not-restored", cr), box("not-ready", cr), box("no-pod", cr), box("recreate", rc)} {
		sel.Candidates = append(sel.Candidates, Candidate{Sandbox: sb, State: NotStarted, Resume: true})
	}
	sel.PodOf = func(sb *agentsv1alpha1.Sandbox) *corev1.Pod { return pods[sb.Name] }

	postOnly := &agentsv1alpha1.SandboxUpdateOps{}
	if got, want := CheckpointLeftBehind(postOnly, sel), []string{"not-restored", "not-ready", "no-pod"}; !slices.Equal(got, want) {
		t.Errorf("Recreate ops with no patch: %v, want %v", got, want)
	}
	patched := &agentsv1alpha1.SandboxUpdateOps{}
	patched.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v3"}]}}`)
	if got, want := CheckpointLeftBehind(patched, sel), []string{"restored", "not-restored", "not-ready", "no-pod"}; !slices.Equal(got, want) {
		t.Errorf("Recreate ops with a new image: %v, want %v", got, want)
	}
	patched.Spec.UpdateStrategy.Type = agentsv1alpha1.UpgradeTypeCheckpointRestore
	if got := CheckpointLeftBehind(patched, sel); len(got) != 0 {
		t.Errorf("CheckpointRestore ops: %v, want none", got)
	}
}
