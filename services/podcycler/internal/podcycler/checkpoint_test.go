package podcycler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// setUpgradeStatus writes what statusagg would: the sandbox's status describes attempt
// at reason.
func setUpgradeStatus(t *testing.T, ns, name, attempt, reason string) {
	t.Helper()
	client := agents(t).AgentsV1alpha1().Sandboxes(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sb, err := client.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		status := metav1.ConditionFalse
		if reason == agentsv1alpha1.UpgradingReasonSucceeded {
			status = metav1.ConditionTrue
		}
		sb.Status.Conditions = []metav1.Condition{
			{Type: agentsv1alpha1.ConditionUpgrading, Status: status, Reason: reason, Message: "upgrading", LastTransitionTime: now},
			{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: attempt, LastTransitionTime: now},
		}
		_, err = client.UpdateStatus(context.Background(), sb, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("write status of sandbox %s/%s (attempt %s, %s): %v", ns, name, attempt, reason, err)
	}
}

// markCheckpointRestore writes what the patcher writes for a CheckpointRestore attempt.
func markCheckpointRestore(s *agentsv1alpha1.Sandbox, attempt string) {
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[upgrade.AnnotationUpgradeStrategy] = upgrade.StrategyValue(attempt)
}

// takeCheckpoint asks for a Checkpoint of the sandbox's pod as podcycler does for
// attempt, and waits until the development checkpointer took it.
func takeCheckpoint(t *testing.T, sb *agentsv1alpha1.Sandbox, attempt string) *agentsv1alpha1.Checkpoint {
	t.Helper()
	cps := agents(t).AgentsV1alpha1().Checkpoints(sb.Namespace)
	cp := &agentsv1alpha1.Checkpoint{
		ObjectMeta: metav1.ObjectMeta{
			Name: upgrade.CheckpointName(sb.Name, attempt), Namespace: sb.Namespace,
			Labels:          map[string]string{upgrade.LabelCheckpointSandbox: sb.Name, upgrade.LabelCheckpointAttempt: upgrade.AttemptHash(attempt)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox"))},
		},
		Spec: agentsv1alpha1.CheckpointSpec{SandboxName: sb.Name, PodName: sb.Name, PersistentContents: []string{"filesystem"}},
	}
	if _, err := cps.Create(context.Background(), cp, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create checkpoint: %v", err)
	}
	return waitCheckpoint(t, sb.Namespace, cp.Name)
}

// waitCheckpoint waits until the checkpoint exists and Succeeded.
func waitCheckpoint(t *testing.T, ns, name string) *agentsv1alpha1.Checkpoint {
	t.Helper()
	var cp *agentsv1alpha1.Checkpoint
	testenv.Eventually(t, 30*time.Second, "checkpoint "+ns+"/"+name+" Succeeded", func() (bool, error) {
		got, err := agents(t).AgentsV1alpha1().Checkpoints(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got.Status.Phase != agentsv1alpha1.CheckpointSucceeded || got.Status.CheckpointID == "" {
			return false, fmt.Errorf("phase %q: %s", got.Status.Phase, got.Status.Message)
		}
		cp = got
		return true, nil
	})
	return cp
}

// checkpointExists reports whether the checkpoint ns/name exists.
func checkpointExists(t *testing.T, ns, name string) bool {
	t.Helper()
	_, err := agents(t).AgentsV1alpha1().Checkpoints(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("get checkpoint %s/%s: %v", ns, name, err)
	}
	return err == nil
}

// strategyMark returns the sandbox's upgrade strategy mark ("" when none).
func strategyMark(t *testing.T, ns, name string) string {
	t.Helper()
	sb, err := agents(t).AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get sandbox %s/%s: %v", ns, name, err)
	}
	return sb.Annotations[upgrade.AnnotationUpgradeStrategy]
}

// A CheckpointRestore attempt that failed keeps its checkpoints (they may be the only
// copy of the workspace); one that succeeded has them deleted, with its strategy mark.
func TestCheckpointsAreKeptAfterAFailureAndDeletedAfterSuccess(t *testing.T) {
	startPodcycler(t)
	ns := testenv.Get(t).Namespace(t)
	sb := createSandbox(t, ns, "sbx-ckpt-keep", "registry.example/sandbox:v1")
	waitPodReady(t, ns, sb.Name, "")
	sb = updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) { markCheckpointRestore(s, testAttempt) })
	cp := takeCheckpoint(t, sb, testAttempt)

	setUpgradeStatus(t, ns, sb.Name, testAttempt, agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	testenv.Consistently(t, 3*time.Second, "the failed attempt's checkpoint and strategy mark are kept", func() (bool, error) {
		if !checkpointExists(t, ns, cp.Name) {
			return false, fmt.Errorf("checkpoint %s was deleted after UpgradePodFailed", cp.Name)
		}
		if mark := strategyMark(t, ns, sb.Name); mark != upgrade.StrategyValue(testAttempt) {
			return false, fmt.Errorf("strategy mark is %q", mark)
		}
		return true, nil
	})

	// A checkpoint of another attempt (a newer one, taken while a cache still
	// shows this attempt's success) is not this attempt's to delete.
	other := takeCheckpoint(t, sb, "uid-newer-attempt")
	setUpgradeStatus(t, ns, sb.Name, testAttempt, agentsv1alpha1.UpgradingReasonSucceeded)
	testenv.Eventually(t, 30*time.Second, "the succeeded attempt's checkpoint and strategy mark deleted", func() (bool, error) {
		if checkpointExists(t, ns, cp.Name) {
			return false, fmt.Errorf("checkpoint %s still there", cp.Name)
		}
		if mark := strategyMark(t, ns, sb.Name); mark != "" {
			return false, fmt.Errorf("strategy mark still %q", mark)
		}
		return true, nil
	})
	if !checkpointExists(t, ns, other.Name) {
		t.Fatalf("checkpoint %s of another attempt was deleted with the succeeded attempt's", other.Name)
	}
}

// The review's sequence: attempt A checkpoints the pod, replaces it, and its new pod
// crashes (UpgradePodFailed). A new attempt B that continues A restores A's checkpoint
// into its pod: it neither loses that checkpoint nor takes a new one of A's pod, which
// was never the workspace.
func TestResumedAttemptRestoresTheFailedAttemptsCheckpoint(t *testing.T) {
	startPodcycler(t)
	// A sidecar that crashes (a CheckpointRestore cannot change the image of a
	// container the pod runs, but may add one).
	r := startUpgrade(t, "sbx-ckpt-resume", func(s *corev1.PodSpec) {
		s.Containers = append(s.Containers, corev1.Container{Name: "sidecar", Image: "registry.example/sidecar:crash"})
	})
	updateSandbox(t, r.ns, r.name, func(s *agentsv1alpha1.Sandbox) { markCheckpointRestore(s, testAttempt) })
	setUpgradeStatus(t, r.ns, r.name, testAttempt, agentsv1alpha1.UpgradingReasonCheckpointing)
	failed := r.bus.subscribe(t, r.ns, r.name, events.TokenFailed)
	r.publishPreHookDone(t)

	ev := next(t, failed, "failed", 60*time.Second)
	assertUpgradePodFailed(t, ev, "container sidecar: CrashLoopBackOff - ")
	cpA := waitCheckpoint(t, r.ns, upgrade.CheckpointName(r.name, testAttempt))
	podA, err := testenv.Get(t).Kube.CoreV1().Pods(r.ns).Get(context.Background(), r.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := podA.Annotations[upgrade.AnnotationRestoreFrom]; got != cpA.Status.CheckpointID {
		t.Fatalf("attempt A's pod restores %q, want its checkpoint %q", got, cpA.Status.CheckpointID)
	}
	// The old pod is gone: the failure names the checkpoint and the strategy
	// that restores it (a Recreate ops would start from an empty filesystem).
	for _, want := range []string{"kept in checkpoint " + cpA.Status.CheckpointID, "updateStrategy.type CheckpointRestore"} {
		if !strings.Contains(ev.Data.Message, want) {
			t.Errorf("failed message %q lacks %q", ev.Data.Message, want)
		}
	}
	// statusagg records the failure; podcycler syncs the sandbox on it.
	setUpgradeStatus(t, r.ns, r.name, testAttempt, agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	testenv.Consistently(t, 2*time.Second, "attempt A's checkpoint is kept after its failure", func() (bool, error) {
		if !checkpointExists(t, r.ns, cpA.Name) {
			return false, fmt.Errorf("checkpoint %s deleted", cpA.Name)
		}
		return true, nil
	})

	// Attempt B continues A, as selector and patcher leave it: the resume record, its own
	// strategy mark, a template that works.
	const attemptB = "uid-2"
	sb := updateSandbox(t, r.ns, r.name, func(s *agentsv1alpha1.Sandbox) {
		markCheckpointRestore(s, attemptB)
		s.Annotations[upgrade.AnnotationResumes] = upgrade.ResumesValue(attemptB, testAttempt, agentsv1alpha1.UpgradingReasonUpgradePodFailed)
		s.Spec.Template.Spec.Containers = s.Spec.Template.Spec.Containers[:1]
	})
	target, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	setUpgradeStatus(t, r.ns, r.name, attemptB, agentsv1alpha1.UpgradingReasonCheckpointing)
	ready := r.bus.subscribe(t, r.ns, r.name, events.TokenPodReady)
	prehookB := events.Event{Type: events.TypePreHookDone, Data: events.Data{
		Ops:            events.OpsRef{Name: testOps, UID: types.UID(attemptB)},
		Sandbox:        events.SandboxRef{Namespace: r.ns, Name: r.name, UID: sb.UID},
		Attempt:        attemptB,
		TargetRevision: target,
		OldPodUID:      podA.UID,
		ResumedAttempt: testAttempt,
		ResumedReason:  agentsv1alpha1.UpgradingReasonUpgradePodFailed,
	}}
	if err := r.bus.publisher.Publish(context.Background(), prehookB); err != nil {
		t.Fatalf("publish prehook-done of attempt B: %v", err)
	}

	podB := waitPodReady(t, r.ns, r.name, string(podA.UID))
	if got := podB.Annotations[upgrade.AnnotationRestoreFrom]; got != cpA.Status.CheckpointID {
		t.Errorf("attempt B's pod restores %q, want attempt A's checkpoint %q (the workspace)", got, cpA.Status.CheckpointID)
	}
	if got := podB.Annotations[upgrade.AnnotationPodAttempt]; got != attemptB {
		t.Errorf("new pod %s = %q, want %q", upgrade.AnnotationPodAttempt, got, attemptB)
	}
	if name := upgrade.CheckpointName(r.name, attemptB); checkpointExists(t, r.ns, name) {
		t.Errorf("attempt B took checkpoint %s of attempt A's pod, which never held the workspace", name)
	}
	if !checkpointExists(t, r.ns, cpA.Name) {
		t.Errorf("attempt A's checkpoint %s is gone before B succeeded", cpA.Name)
	}
	ev = next(t, ready, "pod-ready", 60*time.Second)
	if ev.Data.Attempt != attemptB || ev.Data.NewPodUID != podB.UID {
		t.Errorf("pod-ready attempt %q pod %s, want attempt %q pod %s", ev.Data.Attempt, ev.Data.NewPodUID, attemptB, podB.UID)
	}
}

// A pod built by an older attempt, whose ops was deleted and created again under the
// same name, is not reported Ready (or failed) for that attempt while the sandbox's
// status describes the new one; it is once the status names its attempt.
func TestOlderAttemptsPodIsNotReported(t *testing.T) {
	startPodcycler(t)
	env := testenv.Get(t)
	ns := env.Namespace(t)
	b := connectBus(t)
	sb := createSandbox(t, ns, "sbx-stale", "registry.example/sandbox:v1")
	old := waitPodReady(t, ns, sb.Name, "")
	const attemptB = "uid-2"
	sb = updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) {
		s.Labels = map[string]string{agentsv1alpha1.LabelUpdateOps: testOps}
	})
	// The new attempt is in PreUpgrade: the lifecycle loop leaves a missing pod alone.
	setUpgradeStatus(t, ns, sb.Name, attemptB, agentsv1alpha1.UpgradingReasonPreUpgrade)
	if err := env.Kube.CoreV1().Pods(ns).Delete(context.Background(), sb.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, ns, sb.Name)

	ready := b.subscribe(t, ns, sb.Name, events.TokenPodReady)
	failed := b.subscribe(t, ns, sb.Name, events.TokenFailed)
	revision, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	podA := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: sb.Name, Namespace: ns,
			Labels:          map[string]string{"app": "demo", agentsv1alpha1.LabelPodTemplateHash: revision},
			Annotations:     map[string]string{upgrade.AnnotationPodAttempt: testAttempt, upgrade.AnnotationPodOps: testOps},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox"))},
		},
		Spec: *sb.Spec.Template.Spec.DeepCopy(),
	}
	if _, err := env.Kube.CoreV1().Pods(ns).Create(context.Background(), podA, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create attempt A's pod: %v", err)
	}
	podA = waitPodReady(t, ns, sb.Name, string(old.UID))
	testenv.Consistently(t, 4*time.Second, "no report on attempt A's pod", func() (bool, error) {
		select {
		case ev := <-ready:
			return false, fmt.Errorf("pod-ready published for attempt %q", ev.Data.Attempt)
		case ev := <-failed:
			return false, fmt.Errorf("failed published for attempt %q: %s", ev.Data.Attempt, ev.Data.Message)
		default:
			return true, nil
		}
	})

	// Control: with the status on attempt A, its pod is reported.
	setUpgradeStatus(t, ns, sb.Name, testAttempt, agentsv1alpha1.UpgradingReasonUpgradePod)
	ev := next(t, ready, "pod-ready", 30*time.Second)
	if ev.Data.Attempt != testAttempt || ev.Data.NewPodUID != podA.UID {
		t.Errorf("pod-ready attempt %q pod %s, want %q %s", ev.Data.Attempt, ev.Data.NewPodUID, testAttempt, podA.UID)
	}
}

// The handler of a CheckpointRestore attempt died between deleting the old pod and
// creating the new one: the lifecycle loop creates the pod restoring the attempt's
// checkpoint, and creates none when there is no checkpoint to restore.
func TestMissingPodUnderCheckpointRestoreRestoresOrWaits(t *testing.T) {
	startPodcycler(t)
	for _, withCheckpoint := range []bool{true, false} {
		t.Run(fmt.Sprintf("checkpoint=%v", withCheckpoint), func(t *testing.T) {
			r := startUpgrade(t, fmt.Sprintf("sbx-ckpt-orphan-%v", withCheckpoint), func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/sandbox:v2" })
			sb := updateSandbox(t, r.ns, r.name, func(s *agentsv1alpha1.Sandbox) { markCheckpointRestore(s, testAttempt) })
			var cp *agentsv1alpha1.Checkpoint
			if withCheckpoint {
				cp = takeCheckpoint(t, sb, testAttempt)
			}
			setUpgradeStatus(t, r.ns, r.name, testAttempt, agentsv1alpha1.UpgradingReasonUpgradePod)
			if err := testenv.Get(t).Kube.CoreV1().Pods(r.ns).Delete(context.Background(), r.name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete old pod: %v", err)
			}
			if !withCheckpoint {
				waitPodGone(t, r.ns, r.name)
				testenv.Consistently(t, handlerGrace+3*time.Second, "no pod without a checkpoint to restore", func() (bool, error) {
					p, err := testenv.Get(t).Kube.CoreV1().Pods(r.ns).Get(context.Background(), r.name, metav1.GetOptions{})
					if apierrors.IsNotFound(err) {
						return true, nil
					}
					if err != nil {
						return false, err
					}
					return false, fmt.Errorf("pod %s created, restore-from %q", p.UID, p.Annotations[upgrade.AnnotationRestoreFrom])
				})
				return
			}
			pod := waitPodReady(t, r.ns, r.name, string(r.oldPod.UID))
			if got := pod.Annotations[upgrade.AnnotationRestoreFrom]; got != cp.Status.CheckpointID {
				t.Errorf("pod created by the lifecycle loop restores %q, want the attempt's checkpoint %q", got, cp.Status.CheckpointID)
			}
			if got := pod.Annotations[upgrade.AnnotationPodAttempt]; got != testAttempt {
				t.Errorf("pod %s = %q, want %q", upgrade.AnnotationPodAttempt, got, testAttempt)
			}
		})
	}
}

// A sandbox whose name is too long for a label value is upgraded by CheckpointRestore,
// and its checkpoints are found and deleted after success.
func TestCheckpointRestoreOfALongSandboxName(t *testing.T) {
	startPodcycler(t)
	name := "sbx-" + strings.Repeat("long", 17) // 72 characters
	r := startUpgrade(t, name, func(s *corev1.PodSpec) { s.Containers[0].Env = []corev1.EnvVar{{Name: "V", Value: "2"}} })
	updateSandbox(t, r.ns, r.name, func(s *agentsv1alpha1.Sandbox) { markCheckpointRestore(s, testAttempt) })
	setUpgradeStatus(t, r.ns, r.name, testAttempt, agentsv1alpha1.UpgradingReasonCheckpointing)
	ready := r.bus.subscribe(t, r.ns, r.name, events.TokenPodReady)
	r.publishPreHookDone(t)

	ev := next(t, ready, "pod-ready", 60*time.Second)
	cp := waitCheckpoint(t, r.ns, upgrade.CheckpointName(r.name, testAttempt))
	pod, err := testenv.Get(t).Kube.CoreV1().Pods(r.ns).Get(context.Background(), r.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Data.NewPodUID != pod.UID || pod.Annotations[upgrade.AnnotationRestoreFrom] != cp.Status.CheckpointID {
		t.Errorf("pod %s restores %q, pod-ready for %s; want the checkpoint %q", pod.UID, pod.Annotations[upgrade.AnnotationRestoreFrom], ev.Data.NewPodUID, cp.Status.CheckpointID)
	}

	setUpgradeStatus(t, r.ns, r.name, testAttempt, agentsv1alpha1.UpgradingReasonSucceeded)
	testenv.Eventually(t, 30*time.Second, "the checkpoint of the long-named sandbox deleted", func() (bool, error) {
		if checkpointExists(t, r.ns, cp.Name) {
			return false, fmt.Errorf("checkpoint %s still there", cp.Name)
		}
		return true, nil
	})
}

// A direct CheckpointRestore attempt (the sandbox's own upgradePolicy, no ops, so no
// patcher to write the strategy mark) has its mark written before its checkpoint, so the
// checkpoint is deleted once the attempt succeeded, as an ops's is.
func TestDirectCheckpointRestoreCleansUpAfterSuccess(t *testing.T) {
	startPodcycler(t)
	ns := testenv.Get(t).Namespace(t)
	bus := connectBus(t)
	sb := createSandbox(t, ns, "sbx-ckpt-direct", "registry.example/sandbox:v1")
	old := waitPodReady(t, ns, sb.Name, "")
	sb = updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) {
		s.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeCheckpointRestore}
		// Not the image: a CheckpointRestore cannot restore onto a new one.
		s.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", Value: "v2"}}
	})
	target, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	attempt := upgrade.DirectAttempt(target, sb.Generation)
	setUpgradeStatus(t, ns, sb.Name, attempt, agentsv1alpha1.UpgradingReasonCheckpointing)
	ready := bus.subscribe(t, ns, sb.Name, events.TokenPodReady)
	if err := bus.publisher.Publish(context.Background(), events.Event{Type: events.TypePreHookDone, Data: events.Data{
		Sandbox: events.SandboxRef{Namespace: ns, Name: sb.Name, UID: sb.UID}, Attempt: attempt, TargetRevision: target, OldPodUID: old.UID,
	}}); err != nil {
		t.Fatal(err)
	}
	next(t, ready, "pod-ready", 60*time.Second)
	cp := waitCheckpoint(t, ns, upgrade.CheckpointName(sb.Name, attempt))
	if mark := strategyMark(t, ns, sb.Name); mark != upgrade.StrategyValue(attempt) {
		t.Fatalf("strategy mark = %q, want %q", mark, upgrade.StrategyValue(attempt))
	}

	setUpgradeStatus(t, ns, sb.Name, attempt, agentsv1alpha1.UpgradingReasonSucceeded)
	testenv.Eventually(t, 30*time.Second, "the direct attempt's checkpoint and strategy mark deleted", func() (bool, error) {
		if checkpointExists(t, ns, cp.Name) {
			return false, fmt.Errorf("checkpoint %s still there", cp.Name)
		}
		if mark := strategyMark(t, ns, sb.Name); mark != "" {
			return false, fmt.Errorf("strategy mark still %q", mark)
		}
		return true, nil
	})
}
