package selector

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

const badImage = "registry.example/agent:v2-typo"

// opsFailedSandbox creates what an ops leaves behind when it failed a
// sandbox with spec.upgradePolicy in UpgradePod and was then deleted: the
// template carries the ops's patch (badImage), the pod is the one the
// failed attempt built from it (it never became Ready), the sandbox is
// labelled upgrade-failed=true and its status shows the attempt (the ops
// UID) failed with UpgradePodFailed, recorded at the current generation.
// strategy is the failed attempt's (the patcher's mark when it was
// CheckpointRestore). It returns the sandbox as written and the pod's UID.
func (f *fixture) opsFailedSandbox(name string, opsUID types.UID, policy, strategy agentsv1alpha1.UpgradeType) (*agentsv1alpha1.Sandbox, types.UID) {
	f.t.Helper()
	ctx := context.Background()
	sandboxes := f.agents.AgentsV1alpha1().Sandboxes(f.ns)
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns,
		Labels: map[string]string{agentsv1alpha1.LabelUpgradeFailed: "true"}}}
	if strategy == agentsv1alpha1.UpgradeTypeCheckpointRestore {
		sb.Annotations = map[string]string{upgrade.AnnotationUpgradeStrategy: upgrade.StrategyValue(string(opsUID))}
	}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: badImage}}}}
	sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: policy}
	sb, err := sandboxes.Create(ctx, sb, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("create sandbox %s: %v", name, err)
	}
	revision, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		f.t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: f.ns,
		Labels:          map[string]string{agentsv1alpha1.LabelPodTemplateHash: revision},
		Annotations:     map[string]string{upgrade.AnnotationPodAttempt: string(opsUID)},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox"))},
	}, Spec: *sb.Spec.Template.Spec.DeepCopy()}
	pod, err = testenv.Get(f.t).Kube.CoreV1().Pods(f.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("create pod %s: %v", name, err)
	}
	failure := "container main: ErrImagePull - pull " + badImage + ": not found"
	sb.Status.Phase = agentsv1alpha1.SandboxUpgrading
	sb.Status.Message = failure
	sb.Status.Conditions = []metav1.Condition{
		{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.UpgradingReasonUpgradePodFailed,
			Message: string(opsUID), ObservedGeneration: sb.Generation, LastTransitionTime: metav1.Now()},
		{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: agentsv1alpha1.UpgradingReasonUpgradePodFailed,
			Message: failure, ObservedGeneration: sb.Generation, LastTransitionTime: metav1.Now()},
	}
	sb, err = sandboxes.UpdateStatus(ctx, sb, metav1.UpdateOptions{})
	if err != nil {
		f.t.Fatalf("write the failed status of sandbox %s: %v", name, err)
	}
	return sb, pod.UID
}

// editImage is the user's fix: kubectl patch sbx NAME --type merge -p
// '{"spec":{"template":...}}' with image.
func (f *fixture) editImage(name, image string) *agentsv1alpha1.Sandbox {
	f.t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"containers": []map[string]any{{"name": "main", "image": image}}}}}})
	if err != nil {
		f.t.Fatal(err)
	}
	var sb *agentsv1alpha1.Sandbox
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sb, err = f.agents.AgentsV1alpha1().Sandboxes(f.ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		f.t.Fatalf("edit the template of sandbox %s: %v", name, err)
	}
	return sb
}

// TestDirectContinuesAnOpsFailureAfterTheUserEdits: a sandbox with
// spec.upgradePolicy that an ops left failed in UpgradePod is not upgraded
// again by itself (nothing asked for it); once the user fixes its template,
// a direct attempt continues it from the failed step: `requested` for the
// new revision names the failed attempt and reason (so the patcher resumes
// at UpgradePod, never backing up the failed attempt's empty pod), the
// sandbox is no longer marked upgrade-failed, and the resume record names
// the failed attempt. The same edit seen again requests nothing more.
func TestDirectContinuesAnOpsFailureAfterTheUserEdits(t *testing.T) {
	f := newFixture(t)
	const opsUID = types.UID("0b5e55ed-0000-4000-8000-000000000001")
	f.opsFailedSandbox("sbx", opsUID, agentsv1alpha1.UpgradeTypeRecreate, agentsv1alpha1.UpgradeTypeRecreate)
	f.startSelector()

	testenv.Consistently(t, 3*time.Second, "no upgrade starts by itself after an ops's failure", func() (bool, error) {
		got, err := f.events.sandboxes()
		return err == nil && len(got) == 0, fmt.Errorf("requested %v, err %v", got, err)
	})

	edited := f.editImage("sbx", newImage)
	revision, err := upgrade.Revision(edited.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	f.waitRequested("sbx")
	ev := f.events.all()[0]
	want := events.Data{Attempt: upgrade.DirectAttempt(revision, edited.Generation), ResumedAttempt: string(opsUID), ResumedReason: agentsv1alpha1.UpgradingReasonUpgradePodFailed}
	if ev.Data.Attempt != want.Attempt || ev.Data.ResumedAttempt != want.ResumedAttempt || ev.Data.ResumedReason != want.ResumedReason || ev.Data.Ops.Name != "" {
		t.Errorf("requested %+v; want direct attempt %s resuming %s after %s, no ops", ev.Data, want.Attempt, want.ResumedAttempt, want.ResumedReason)
	}
	sb := f.getSandbox("sbx")
	if v, ok := sb.Labels[agentsv1alpha1.LabelUpgradeFailed]; ok {
		t.Errorf("label %s=%q left on a sandbox being upgraded again", agentsv1alpha1.LabelUpgradeFailed, v)
	}
	if failed, reason, ok := upgrade.Resumes(sb, want.Attempt); !ok || failed != string(opsUID) || reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed {
		t.Errorf("resume record %q; want %s continuing %s (%s)", sb.Annotations[upgrade.AnnotationResumes], want.Attempt, opsUID, agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	}
	if ev.Data.SandboxResourceVersion != sb.ResourceVersion {
		t.Errorf("requested carries resourceVersion %s; the prepared sandbox is at %s", ev.Data.SandboxResourceVersion, sb.ResourceVersion)
	}

	// The status still shows the ops's failure until statusagg records the
	// attempt: the same look again publishes the same message (dropped as a
	// duplicate), never another attempt.
	f.updateSandboxAnnotation("sbx", "test.molt.dev/poke", "1")
	testenv.Consistently(t, 2*time.Second, "one requested for one edit", func() (bool, error) {
		got, err := f.events.sandboxes()
		return err == nil && len(got) == 1, fmt.Errorf("requested %v, err %v", got, err)
	})
}

// TestDirectHoldsAnOpsCheckpointRestoreFailureUnderRecreate: the failed
// attempt was a CheckpointRestore that had replaced the original pod, so the
// workspace is only in its checkpoint; the sandbox's own policy is Recreate,
// which would build the new pod from an empty filesystem. The user's edit
// is not rolled out: nothing is requested, and the sandbox records why and
// what to do (statusagg shows it as the DirectUpgradeHeld condition, the
// status message and a Warning Event). Setting the policy to
// CheckpointRestore then continues it.
func TestDirectHoldsAnOpsCheckpointRestoreFailureUnderRecreate(t *testing.T) {
	f := newFixture(t)
	const opsUID = types.UID("0b5e55ed-0000-4000-8000-000000000002")
	f.opsFailedSandbox("kept", opsUID, agentsv1alpha1.UpgradeTypeRecreate, agentsv1alpha1.UpgradeTypeCheckpointRestore)
	f.startSelector()
	edited := f.editImage("kept", newImage)

	testenv.Eventually(t, 30*time.Second, "why the edit is not rolled out, recorded on the sandbox", func() (bool, error) {
		sb := f.getSandbox("kept")
		why := upgrade.DirectHeld(sb)
		return why != "", fmt.Errorf("annotation %q at generation %d", sb.Annotations[upgrade.AnnotationDirectHeld], sb.Generation)
	})
	why := upgrade.DirectHeld(f.getSandbox("kept"))
	for _, part := range []string{fmt.Sprintf("generation %d", edited.Generation), string(opsUID), agentsv1alpha1.UpgradingReasonUpgradePodFailed,
		"CheckpointRestore", "empty filesystem", "create a SandboxUpdateOps"} {
		if !strings.Contains(why, part) {
			t.Errorf("the record does not say %q: %s", part, why)
		}
	}
	if got, err := f.events.sandboxes(); err != nil || len(got) != 0 {
		t.Fatalf("requested %v (err %v) for an edit that would start the pod from an empty filesystem", got, err)
	}

	patch := []byte(`{"spec":{"upgradePolicy":{"type":"CheckpointRestore"}}}`)
	if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Patch(context.Background(), "kept", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitRequested("kept")
	if ev := f.events.all()[0]; ev.Data.ResumedAttempt != string(opsUID) {
		t.Errorf("requested %+v does not continue the failed attempt %s", ev.Data, opsUID)
	}
	if sb := f.getSandbox("kept"); sb.Annotations[upgrade.AnnotationDirectHeld] != "" {
		t.Errorf("the held record stays on a sandbox being upgraded: %q", sb.Annotations[upgrade.AnnotationDirectHeld])
	}
}

// TestDirectWaitsForTheOpsThatFailedItToEnd: while the ops that failed the
// sandbox is still active (other sandboxes of it upgrading), it owns the
// sandbox and its counters; the user's edit is continued directly once the
// ops ends, without another change of the sandbox.
func TestDirectWaitsForTheOpsThatFailedItToEnd(t *testing.T) {
	f := newFixture(t)
	f.startSelector()
	ops := f.ops("fix", 1, badImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "none"}}
	})
	f.waitFinalizer("fix")
	f.opsFailedSandbox("sbx", ops.UID, agentsv1alpha1.UpgradeTypeRecreate, agentsv1alpha1.UpgradeTypeRecreate)
	patch := []byte(`{"metadata":{"labels":{"` + agentsv1alpha1.LabelUpdateOps + `":"fix"},"annotations":{"` + upgrade.AnnotationClaim + `":"` + upgrade.ClaimValue("fix", string(ops.UID)) + `"}}}`)
	if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Patch(context.Background(), "sbx", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.editImage("sbx", newImage)
	testenv.Consistently(t, 3*time.Second, "nothing requested while the ops that failed it is active", func() (bool, error) {
		got, err := f.events.sandboxes()
		return err == nil && len(got) == 0, fmt.Errorf("requested %v, err %v", got, err)
	})

	f.updateOps("fix", true, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Status.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
		meta.SetStatusCondition(&o.Status.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: "FailureBudgetExhausted"})
	})
	f.waitRequested("sbx")
	if ev := f.events.all()[0]; ev.Data.ResumedAttempt != string(ops.UID) || ev.Data.Ops.Name != "" {
		t.Errorf("requested %+v; want a direct attempt continuing %s", ev.Data, ops.UID)
	}
	if got, err := f.claimed("fix"); err != nil || len(got) != 0 {
		t.Errorf("still labelled with the ended ops: %v (err %v)", got, err)
	}
}

// updateSandboxAnnotation sets one annotation (a change that is not the
// spec's: the selector looks at the sandbox again).
func (f *fixture) updateSandboxAnnotation(name, key, value string) {
	f.t.Helper()
	if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Patch(context.Background(), name, types.MergePatchType, upgrade.AnnotationPatch(key, value), metav1.PatchOptions{}); err != nil {
		f.t.Fatalf("annotate sandbox %s: %v", name, err)
	}
}
