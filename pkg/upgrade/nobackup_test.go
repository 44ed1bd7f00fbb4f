package upgrade

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// An ops with postUpgrade but no preUpgrade (the guides' "continue after
// UpgradePodFailed" and rollback ops) names, the sandboxes it would
// give a new pod with no backup before postUpgrade runs: the ones not started
// and the ones resuming a PreUpgradeFailed or a failure whose attempt ran no
// preUpgrade, and those whose last upgrade took
// one (whether it is still there is up to that upgrade's postUpgrade: guide
// 000's deletes it), not those resuming after their backup; with preUpgrade,
// or under CheckpointRestore, none.
func TestWithoutBackupNamesTheSandboxesNeverBackedUp(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "cont", Namespace: "ns", UID: "u2"}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p"}}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v3"}]}}`)}
	ops.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PostUpgrade: &agentsv1alpha1.UpgradeAction{}}
	box := func(name, reason string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"pool": "p"}}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
		sb.Status.Phase = agentsv1alpha1.SandboxRunning
		if reason != "" {
			sb.Status.Phase = agentsv1alpha1.SandboxUpgrading
			sb.Status.Conditions = []metav1.Condition{
				{Type: ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: "u1"},
				{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
			}
		}
		return sb
	}
	upgraded := box("upgraded-with-backup", agentsv1alpha1.UpgradingReasonSucceeded)
	upgraded.Status.Phase = agentsv1alpha1.SandboxRunning
	upgraded.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{}}
	upgradedBare := box("upgraded-without-backup", agentsv1alpha1.UpgradingReasonSucceeded)
	upgradedBare.Status.Phase = agentsv1alpha1.SandboxRunning
	backedUp := func(sb *agentsv1alpha1.Sandbox) *agentsv1alpha1.Sandbox {
		sb.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{}, PostUpgrade: &agentsv1alpha1.UpgradeAction{}}
		return sb
	}
	// A failed attempt that ran no preUpgrade (a direct upgrade of a
	// sandbox without one) took no backup, unless it resumed one that did.
	resumedChain := box("pod-failed-resuming", agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	resumedChain.Annotations = map[string]string{AnnotationResumes: ResumesValue("u1", "u0", agentsv1alpha1.UpgradingReasonUpgradePodFailed)}
	all := []*agentsv1alpha1.Sandbox{
		upgraded, upgradedBare,
		box("fresh", ""),
		backedUp(box("pod-failed", agentsv1alpha1.UpgradingReasonUpgradePodFailed)),
		box("pod-failed-unbacked", agentsv1alpha1.UpgradingReasonUpgradePodFailed),
		resumedChain,
		backedUp(box("post-failed", agentsv1alpha1.UpgradingReasonPostUpgradeFailed)),
		box("pre-failed", agentsv1alpha1.UpgradingReasonPreUpgradeFailed),
	}
	sel, err := Select(ops, all, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"fresh", "pod-failed-unbacked", "pre-failed", "upgraded-with-backup", "upgraded-without-backup"}
	if got := WithoutBackup(ops, sel); !slices.Equal(got, want) {
		t.Errorf("withoutBackup = %v, want %v", got, want)
	}
	// pod-failed's new pod was refused before its old one was deleted: the
	// resume backs that original pod up again (ResumeAt), and this ops,
	// with no preUpgrade, takes nothing of what it held since (a review).
	// A pod the failed attempt built holds no workspace of its own.
	pods := map[string]*corev1.Pod{
		"pod-failed":  {ObjectMeta: metav1.ObjectMeta{Name: "pod-failed"}},
		"post-failed": {ObjectMeta: metav1.ObjectMeta{Name: "post-failed", Annotations: map[string]string{AnnotationPodAttempt: "u1"}}},
	}
	sel.PodOf = func(sb *agentsv1alpha1.Sandbox) *corev1.Pod { return pods[sb.Name] }
	want = []string{"fresh", "pod-failed", "pod-failed-unbacked", "pre-failed", "upgraded-with-backup", "upgraded-without-backup"}
	if got := WithoutBackup(ops, sel); !slices.Equal(got, want) {
		t.Errorf("withoutBackup with pod-failed's original pod still there = %v, want %v", got, want)
	}
	sel.PodOf = nil
	withPre := ops.DeepCopy()
	withPre.Spec.Lifecycle.PreUpgrade = &agentsv1alpha1.UpgradeAction{}
	if got := WithoutBackup(withPre, sel); len(got) != 0 {
		t.Errorf("withoutBackup with a preUpgrade = %v, want none", got)
	}
	checkpoint := ops.DeepCopy()
	checkpoint.Spec.UpdateStrategy.Type = agentsv1alpha1.UpgradeTypeCheckpointRestore
	if got := WithoutBackup(checkpoint, sel); len(got) != 0 {
		t.Errorf("withoutBackup under CheckpointRestore = %v, want none", got)
	}

	// An ops with no hooks at all (guide 001's rollback after a
	// PreUpgradeFailed) names, for WithoutRestore, the sandboxes whose last
	// upgrade succeeded with a postUpgrade: their workspace is in the pod.
	upgraded.Spec.Lifecycle.PostUpgrade = &agentsv1alpha1.UpgradeAction{}
	bare := ops.DeepCopy()
	bare.Spec.Lifecycle = nil
	if sel, err = Select(bare, all, nil); err != nil {
		t.Fatal(err)
	}
	if got := WithoutRestore(bare, sel); !slices.Equal(got, []string{"upgraded-with-backup"}) {
		t.Errorf("WithoutRestore = %v, want [upgraded-with-backup]", got)
	}
	if got := Unprotected(bare, sel); !slices.Equal(got, []string{"upgraded-with-backup"}) {
		t.Errorf("Unprotected with no hooks = %v, want [upgraded-with-backup]", got)
	}
	if got := WithoutRestore(ops, sel); len(got) != 0 {
		t.Errorf("WithoutRestore of an ops with a postUpgrade = %v, want none (WithoutBackup's case)", got)
	}
	noPatch := bare.DeepCopy()
	noPatch.Spec.Patch.Raw = nil
	if got := WithoutRestore(noPatch, sel); len(got) != 0 {
		t.Errorf("WithoutRestore with no patch = %v, want none", got)
	}
}

// A rollback keeps the pod only as podcycler does: the pod is there, not
// going and Ready, and the attempt does not checkpoint; an unknown pod is not
// kept (a review: the template alone hid a replaced pod's lost workspace).
func TestRollbackKeepsPod(t *testing.T) {
	tpl := func(image string) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}
	}
	original, ok := OriginalTemplateValue(tpl("img:v1"))
	if !ok {
		t.Fatal("the template cannot be kept")
	}
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Annotations: map[string]string{
		AnnotationOriginalTemplate: original, AnnotationOriginalTemplateFor: "u1"}}}
	sb.Spec.Template = tpl("img:v2")
	sb.Status.Phase = agentsv1alpha1.SandboxUpgrading
	sb.Status.Conditions = []metav1.Condition{
		{Type: ConditionAttempt, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.UpgradingReasonPreUpgradeFailed, Message: "u1"},
		{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: agentsv1alpha1.UpgradingReasonPreUpgradeFailed},
	}
	rollback := &agentsv1alpha1.SandboxUpdateOps{}
	rollback.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v1"}]}}`)}
	ready := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	if !RollbackKeepsPod(sb, rollback, ready) {
		t.Errorf("a rollback to the template its Ready pod runs: not kept, want kept")
	}
	if RollbackKeepsPod(sb, rollback, &corev1.Pod{}) {
		t.Errorf("a pod that is not Ready: kept, want replaced")
	}
	if RollbackKeepsPod(sb, rollback, nil) {
		t.Errorf("no pod known: kept, want not")
	}
	cr := rollback.DeepCopy()
	cr.Spec.UpdateStrategy.Type = agentsv1alpha1.UpgradeTypeCheckpointRestore
	if RollbackKeepsPod(sb, cr, ready) {
		t.Errorf("under CheckpointRestore: kept, want replaced")
	}
	forward := rollback.DeepCopy()
	forward.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v3"}]}}`)
	if RollbackKeepsPod(sb, forward, ready) {
		t.Errorf("a patch to another image: kept, want replaced")
	}
}
