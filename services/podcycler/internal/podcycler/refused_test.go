package podcycler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// assertOldPodRuns fails the test unless the sandbox's pod is still the old
// one, not being deleted, and no pod was created for the upgrade.
func (r *upgradeRun) assertOldPodRuns(t *testing.T) {
	t.Helper()
	pod, err := testenv.Get(t).Kube.CoreV1().Pods(r.ns).Get(context.Background(), r.name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the old pod: %v", err)
	}
	if pod.UID != r.oldPod.UID || pod.DeletionTimestamp != nil {
		t.Errorf("pod %s (deleting: %v), want the old pod %s untouched", pod.UID, pod.DeletionTimestamp != nil, r.oldPod.UID)
	}
	if got := r.pods.of(r.name); len(got) != 0 {
		t.Errorf("pods created for the upgrade = %v, want none", got)
	}
}

// A Checkpoint that the API server refuses (an admission policy on
// checkpoints) fails the sandbox's Checkpointing at once with the server's
// words; the old pod keeps running. Before, the create was left to
// redeliveries minutes apart, and the sandbox failed on a deadline with no
// word of the cause. A paused sandbox's failure says to resume it with
// Recreate: its pod stops with the pause, and its resume is not woken, so a
// CheckpointRestore resume would find no pod to checkpoint (review).
func TestRefusedCheckpointFailsCheckpointingAtOnce(t *testing.T) {
	startPodcycler(t)
	for _, paused := range []bool{false, true} {
		t.Run(fmt.Sprintf("paused=%v", paused), func(t *testing.T) {
			refusedCheckpoint(t, paused)
		})
	}
}

func refusedCheckpoint(t *testing.T, paused bool) {
	r := startUpgrade(t, "sbx-ckpt-refused", func(s *corev1.PodSpec) {
		s.Containers[0].Env = []corev1.EnvVar{{Name: "UPGRADED", Value: "1"}}
	})
	updateSandbox(t, r.ns, r.name, func(s *agentsv1alpha1.Sandbox) {
		markCheckpointRestore(s, testAttempt)
		s.Spec.Paused = paused // mid-stage: the pause waits for the attempt
	})
	const words = "checkpoints are not allowed in this namespace"
	testenv.Get(t).Refuse(t, r.ns, testenv.Refusal{
		Group: agentsv1alpha1.SchemeGroupVersion.Group, Resource: "checkpoints",
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Allow:      "false", Message: words,
	}, func(ctx context.Context) error {
		probe := &agentsv1alpha1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: r.ns},
			Spec: agentsv1alpha1.CheckpointSpec{SandboxName: r.name, PodName: r.name, PersistentContents: []string{"filesystem"}}}
		_, err := agents(t).AgentsV1alpha1().Checkpoints(r.ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	r.publishPreHookDone(t)

	ev := wantCheckpointFailed(t, failed,
		fmt.Sprintf("the API server refused checkpoint %s of pod %s of sandbox %s/%s", upgrade.CheckpointName(r.name, testAttempt), r.name, r.ns, r.name),
		words, "podcycler did not delete the old pod", "then create a new SandboxUpdateOps",
	)
	const recreate = "resume it with a SandboxUpdateOps of updateStrategy.type Recreate"
	if got := strings.Contains(ev.Data.Message, recreate); got != paused {
		t.Errorf("message %q says %q: %v, want %v (paused %v)", ev.Data.Message, recreate, got, paused, paused)
	}
	r.assertOldPodRuns(t)
}

// A delete of the old pod that the API server refuses (an admission policy
// guarding pods, or podcycler's RBAC) fails the sandbox's UpgradePod at once
// with the server's words; the old pod keeps running and no new one is made.
func TestRefusedOldPodDeleteFailsUpgradePodAtOnce(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-delete-refused", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/sandbox:v2" })
	const words = "this pod may not be deleted"
	testenv.Get(t).Refuse(t, r.ns, testenv.Refusal{
		Resource:   "pods",
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
		Allow:      fmt.Sprintf("oldObject.metadata.name != '%s'", r.name), Message: words,
	}, func(ctx context.Context) error {
		return testenv.Get(t).Kube.CoreV1().Pods(r.ns).Delete(ctx, r.name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	})
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	r.publishPreHookDone(t)

	ev := next(t, failed, "failed", 20*time.Second)
	t.Logf("failed: %s", ev.Data.Message)
	if ev.Data.Stage != agentsv1alpha1.UpgradingReasonUpgradePod || ev.Data.Reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed {
		t.Errorf("failed stage/reason = %s/%s, want UpgradePod/UpgradePodFailed", ev.Data.Stage, ev.Data.Reason)
	}
	for _, want := range []string{
		fmt.Sprintf("the API server refused to delete the old pod %s (uid %s) of sandbox %s/%s", r.name, r.oldPod.UID, r.ns, r.name),
		words, "the old pod keeps running and no new pod was created", "then create a new SandboxUpdateOps to resume",
	} {
		if !strings.Contains(ev.Data.Message, want) {
			t.Errorf("message %q lacks %q", ev.Data.Message, want)
		}
	}
	r.assertOldPodRuns(t)
}

// A sandbox whose spec.template is removed after the patch (spec.templateRef
// set instead) fails UpgradePod at once, saying what to do; the old pod keeps
// running. Before, the handler skipped it with a log line and the sandbox
// waited for the watchdog's deadline and its generic words.
func TestNoTemplateFailsUpgradePodAtOnce(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-no-template", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/sandbox:v2" })
	updateSandbox(t, r.ns, r.name, func(s *agentsv1alpha1.Sandbox) {
		s.Spec.Template = nil
		s.Spec.TemplateRef = &agentsv1alpha1.SandboxTemplateRef{Name: "elsewhere"}
	})
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	r.publishPreHookDone(t)

	ev := next(t, failed, "failed", 20*time.Second)
	if ev.Data.Stage != agentsv1alpha1.UpgradingReasonUpgradePod || ev.Data.Reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed {
		t.Errorf("failed stage/reason = %s/%s, want UpgradePod/UpgradePodFailed", ev.Data.Stage, ev.Data.Reason)
	}
	for _, want := range []string{"has no spec.template to build its new pod from", "the old pod was not deleted", "set spec.template again"} {
		if !strings.Contains(ev.Data.Message, want) {
			t.Errorf("message %q lacks %q", ev.Data.Message, want)
		}
	}
	r.assertOldPodRuns(t)
}

// A pause whose pod delete the API server refuses (an admission policy on pod
// deletes, podcycler's RBAC) is recorded on the sandbox with the server's
// words, so statusagg can say why the sandbox does not pause; the record goes
// once the sandbox is unpaused. Before, the delete was only retried, with no
// word anywhere a user looks.
func TestRefusedPauseDeleteIsRecorded(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	startPodcycler(t)
	sb := createSandbox(t, ns, "sbx-pause-refused", "registry.example/sandbox:v1")
	pod := waitPodReady(t, ns, sb.Name, "")
	const words = "pods of this namespace may not be deleted"
	env.Refuse(t, ns, testenv.Refusal{
		Resource:   "pods",
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
		Allow:      "false", Message: words,
	}, func(ctx context.Context) error {
		return env.Kube.CoreV1().Pods(ns).Delete(ctx, sb.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	})

	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) { s.Spec.Paused = true })
	testenv.Eventually(t, 20*time.Second, "the refused delete recorded on the sandbox", func() (bool, error) {
		got, err := agents(t).AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), sb.Name, metav1.GetOptions{})
		return err == nil && strings.Contains(got.Annotations[upgrade.AnnotationPodDeleteError], words), err
	})
	if now, err := env.Kube.CoreV1().Pods(ns).Get(context.Background(), sb.Name, metav1.GetOptions{}); err != nil || now.UID != pod.UID {
		t.Fatalf("the pod after a refused pause delete: %v, %v; want the same pod", now, err)
	}

	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) { s.Spec.Paused = false })
	testenv.Eventually(t, 20*time.Second, "the record removed once unpaused", func() (bool, error) {
		got, err := agents(t).AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), sb.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, recorded := got.Annotations[upgrade.AnnotationPodDeleteError]
		return !recorded, nil
	})
}

// A CheckpointRestore attempt whose template, by the time the pod is replaced, runs
// another image than the pod (a direct attempt's template edited again meanwhile, or a
// template changed before the ops) fails Checkpointing, touching nothing: a checkpoint is
// never restored onto a new image.
func TestCheckpointRestoreOntoANewImageFailsCheckpointing(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-ckpt-image", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/sandbox:v2" })
	updateSandbox(t, r.ns, r.name, func(s *agentsv1alpha1.Sandbox) { markCheckpointRestore(s, testAttempt) })
	setUpgradeStatus(t, r.ns, r.name, testAttempt, agentsv1alpha1.UpgradingReasonCheckpointing)
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	r.publishPreHookDone(t)

	wantCheckpointFailed(t, failed,
		"container main: registry.example/sandbox:v1 → registry.example/sandbox:v2",
		"cannot restore a checkpoint onto a new image", "keeps running", "updateStrategy.type Recreate",
	)
	if checkpointExists(t, r.ns, upgrade.CheckpointName(r.name, testAttempt)) {
		t.Error("a checkpoint was taken for a restore that cannot happen")
	}
	r.assertOldPodRuns(t)
}

// TestCheckpointBeingDeletedFailsCheckpointing: the attempt's checkpoint
// Succeeded but is being deleted (a checkpointer's finalizer holds it): it is
// no checkpoint to restore from, so Checkpointing fails, naming it, and the
// old pod keeps running; it is not replaced by a pod that would restore from
// an id that is going away.
func TestCheckpointBeingDeletedFailsCheckpointing(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-ckpt-deleting", func(s *corev1.PodSpec) {
		s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "RELEASE", Value: "2"})
	})
	sb := updateSandbox(t, r.ns, r.name, func(s *agentsv1alpha1.Sandbox) { markCheckpointRestore(s, testAttempt) })
	cp := takeCheckpoint(t, sb, testAttempt)
	cps := agents(t).AgentsV1alpha1().Checkpoints(r.ns)
	ctx := context.Background()
	if _, err := cps.Patch(ctx, cp.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":["molt.dev/test-hold"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, err := cps.Patch(ctx, cp.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("remove the test's finalizer from checkpoint %s: %v", cp.Name, err)
		}
	})
	if err := cps.Delete(ctx, cp.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	setUpgradeStatus(t, r.ns, r.name, testAttempt, agentsv1alpha1.UpgradingReasonCheckpointing)
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	r.publishPreHookDone(t)

	wantCheckpointFailed(t, failed, cp.Name, "deleted", "podcycler did not delete the old pod")
	r.assertOldPodRuns(t)
}

// wantCheckpointFailed waits for the failed event on failed and checks that it
// is filed as CheckpointFailed under Checkpointing with a message holding
// every one of wants.
func wantCheckpointFailed(t *testing.T, failed <-chan events.Event, wants ...string) events.Event {
	t.Helper()
	ev := next(t, failed, "failed", 20*time.Second)
	t.Logf("failed: %s", ev.Data.Message)
	if ev.Data.Stage != agentsv1alpha1.UpgradingReasonCheckpointing || ev.Data.Reason != agentsv1alpha1.UpgradingReasonCheckpointFailed {
		t.Errorf("failed stage/reason = %s/%s, want Checkpointing/CheckpointFailed", ev.Data.Stage, ev.Data.Reason)
	}
	for _, want := range wants {
		if !strings.Contains(ev.Data.Message, want) {
			t.Errorf("message %q lacks %q", ev.Data.Message, want)
		}
	}
	return ev
}
