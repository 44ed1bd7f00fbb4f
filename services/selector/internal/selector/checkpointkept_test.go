package selector

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A sandbox whose CheckpointRestore upgrade failed after its old pod was gone
// has its workspace only in the kept checkpoint. An ops of the default type
// (Recreate), as a guide's "continue" ops is written, would start its new pod
// empty: it is paused before its first sandbox, naming it; resumed by the
// user it goes on, and is not paused for it again. Under CheckpointRestore it
// is not paused.
func TestRecreateOpsResumingAKeptCheckpointPauses(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.sandbox("sbx-1", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.startSelector()
	nodeSelector := func(zone string, strategy agentsv1alpha1.UpgradeType) func(*agentsv1alpha1.SandboxUpdateOps) {
		return func(o *agentsv1alpha1.SandboxUpdateOps) {
			o.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"nodeSelector":{"zone":"` + zone + `"}}}`)}
			o.Spec.UpdateStrategy.Type = strategy
		}
	}
	first := f.ops("cr", 2, oldImage, nodeSelector("nowhere", agentsv1alpha1.UpgradeTypeCheckpointRestore))
	f.waitClaimed("cr", "sbx-0", "sbx-1")
	// Both failed in UpgradePod; sbx-0's old pod was gone by then (statusagg's
	// note), sbx-1's was not.
	f.finish("sbx-0", first, agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	f.finish("sbx-1", first, agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	client := f.agents.AgentsV1alpha1().Sandboxes(f.ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sb, err := client.Get(ctx, "sbx-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
		c.Message = upgrade.WithNote("pod sbx-0 not Ready after 40s: not scheduled", upgrade.CheckpointKeptNote(f.ns, "sbx-0", "ckpt-0"))
		_, err = client.UpdateStatus(ctx, sb, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	f.updateOps("cr", true, func(o *agentsv1alpha1.SandboxUpdateOps) { o.Status.Phase = agentsv1alpha1.SandboxUpdateOpsFailed })
	f.deleteAllOps()

	f.ops("recreate", 2, oldImage, nodeSelector("z1", ""))
	f.waitPausedBy("recreate", upgrade.AnnotationCheckpointKept, upgrade.AnnotationCheckpointKeptPausedAt, "sbx-0")
	f.resumeAndWaitClaimed("recreate", "sbx-0", "sbx-1")
}

// After a PostUpgradeFailed of a CheckpointRestore attempt, a Recreate ops
// (the guides' postUpgrade-only "continue") is paused only for a sandbox
// whose resume would build the pod again: sbx-1's pod is not restored yet.
// sbx-0's pod, Ready and restored from the checkpoint, is kept, and
// postUpgrade runs on it again: it is not named (a review found every such
// sandbox named, the selector not looking at the pods).
func TestRecreateOpsAfterACheckpointRestorePostUpgradeFailure(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	env := testenv.Get(t)
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.sandbox("sbx-1", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.startSelector()
	first := f.ops("cr", 2, oldImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"nodeSelector":{"zone":"z1"}}}`)}
		o.Spec.UpdateStrategy.Type = agentsv1alpha1.UpgradeTypeCheckpointRestore
	})
	f.waitClaimed("cr", "sbx-0", "sbx-1")
	for _, name := range []string{"sbx-0", "sbx-1"} {
		sb := f.getSandbox(name)
		revision, err := upgrade.Revision(sb.Spec.Template)
		if err != nil {
			t.Fatal(err)
		}
		// The attempt's pod, restored (sbx-0) or still to be (sbx-1).
		annotations := map[string]string{upgrade.AnnotationPodAttempt: string(first.UID), upgrade.AnnotationRestoreFrom: "ckpt-" + name}
		if name == "sbx-0" {
			annotations[upgrade.AnnotationRestored] = "ckpt-" + name
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Annotations: annotations,
			Labels:          map[string]string{agentsv1alpha1.LabelPodTemplateHash: revision},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox"))}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: oldImage}}}}
		if _, err := env.Kube.CoreV1().Pods(f.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "pod "+name+" Ready", func() (bool, error) {
			p, err := env.Kube.CoreV1().Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return upgrade.PodReady(p), fmt.Errorf("conditions %v", p.Status.Conditions)
		})
		f.updateSandbox(name, func(s *agentsv1alpha1.Sandbox) {
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, upgrade.AnnotationUpgradeStrategy, upgrade.StrategyValue(string(first.UID)))
		})
		f.finish(name, first, agentsv1alpha1.UpgradingReasonPostUpgradeFailed)
	}
	f.updateOps("cr", true, func(o *agentsv1alpha1.SandboxUpdateOps) { o.Status.Phase = agentsv1alpha1.SandboxUpdateOpsFailed })
	f.deleteAllOps()

	f.ops("continue", 2, oldImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Patch = runtime.RawExtension{}
		o.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PostUpgrade: &agentsv1alpha1.UpgradeAction{
			Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/sh", "-c", "true"}}}}
	})
	testenv.Eventually(t, 30*time.Second, "the Recreate ops paused for sbx-1 alone", func() (bool, error) {
		o, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(ctx, "continue", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v := o.Annotations[upgrade.AnnotationCheckpointKept]
		return o.Spec.Paused && v == "sbx-1", fmt.Errorf("paused %v, %s %q", o.Spec.Paused, upgrade.AnnotationCheckpointKept, v)
	})
}
