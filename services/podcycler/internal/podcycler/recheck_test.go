package podcycler

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	agentsclient "molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/upgrade"
)

// After a checkpoint, which may take up to --pod-ready-timeout, the handler reads the
// sandbox again and does not destroy its pod when the attempt ended meanwhile (the
// watchdog failed it), the claim moved, or the sandbox is gone.
func TestStillToReplaceAfterTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	client, err := agentsclient.NewForConfig(env.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	sandboxes := client.AgentsV1alpha1().Sandboxes(ns)
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sbx-recheck", Namespace: ns, Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "ops"}}}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/sandbox:v1"}}}}
	if sb, err = sandboxes.Create(ctx, sb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setReason := func(reason string) {
		t.Helper()
		cur, err := sandboxes.Get(ctx, sb.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status.Conditions = []metav1.Condition{
			{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason, Message: "m", LastTransitionTime: metav1.Now()},
			{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: "a1", LastTransitionTime: metav1.Now()},
		}
		if _, err := sandboxes.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := &cycler{agents: client}
	d := events.Data{Ops: events.OpsRef{Name: "ops"}, Attempt: "a1"}
	check := func(want string) {
		t.Helper()
		got, err := c.stillToReplace(ctx, sb, d)
		if err != nil || !strings.Contains(got, want) || (want == "") != (got == "") {
			t.Fatalf("stillToReplace = %q, %v; want %q", got, err, want)
		}
	}
	setReason(agentsv1alpha1.UpgradingReasonCheckpointing)
	check("")
	setReason(agentsv1alpha1.UpgradingReasonCheckpointFailed)
	check("already ended in CheckpointFailed")
	setReason(agentsv1alpha1.UpgradingReasonCheckpointing)
	claim := func(attempt string) {
		t.Helper()
		if _, err := sandboxes.Patch(ctx, sb.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+upgrade.AnnotationClaim+`":"ops `+attempt+`"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claim("a1")
	check("")
	claim("a2") // the ops deleted and applied again under its name
	check("no longer claimed")
	claim("a1")
	if _, err := sandboxes.Patch(ctx, sb.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"agents.kruise.io/update-ops":"other"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	check("no longer claimed")
	if err := sandboxes.Delete(ctx, sb.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "sandbox gone", func() (bool, error) {
		_, err := sandboxes.Get(ctx, sb.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	check("the sandbox is gone")
}
