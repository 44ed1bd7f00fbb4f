package patcher

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// withBackup gives the ops a preUpgrade hook.
func withBackup(ops *agentsv1alpha1.SandboxUpdateOps) {
	ops.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{
		Exec: &agentsv1alpha1.ExecAction{Command: []string{"sh", "-c", "tar -czf /backup/state.tgz /workspace"}}}}
}

// templateUnchanged fails t unless sb's template is still at the generation read.
func templateUnchanged(t *testing.T, sb *agentsv1alpha1.Sandbox) {
	t.Helper()
	now, err := client(t).AgentsV1alpha1().Sandboxes(sb.Namespace).Get(context.Background(), sb.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.Generation != sb.Generation || now.Spec.Template.Spec.Containers[0].Image != oldImage {
		t.Errorf("sandbox at generation %d with image %s, want %d and %s: nothing patched", now.Generation, now.Spec.Template.Spec.Containers[0].Image, sb.Generation, oldImage)
	}
}

// A fresh attempt on a sandbox that has no pod, whose ops has a preUpgrade
// hook, fails PreUpgrade and patches nothing. Before, it was patched and
// hookrunner skipped the backup, so postUpgrade restored an older backup
// over what the sandbox's volumes held.
func TestNoPodToBackUpFailsPreUpgrade(t *testing.T) {
	startPatcher(t)
	ns := testenv.Get(t).Namespace(t)
	ops, sb := claimed(t, ns, "sbx-nopod", withBackup)
	out := subscribe(t, ns)
	request(t, ops, sb)
	select {
	case ev := <-out:
		if ev.Type != events.TypeFailed || ev.Data.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed {
			t.Fatalf("%s %s %q, want PreUpgradeFailed", ev.Type, ev.Data.Reason, ev.Data.Message)
		}
		for _, want := range []string{"sandbox " + ns + "/sbx-nopod has no pod", "preUpgrade cannot back it up", "kubectl molt retry up -n " + ns} {
			if !strings.Contains(ev.Data.Message, want) {
				t.Errorf("message %q lacks %q", ev.Data.Message, want)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20s of requested")
	}
	templateUnchanged(t, sb)
}

// A paused sandbox admitted to be woken (the resume trigger) that its user
// unpaused before its pod came back is not patched until that pod is Ready,
// then goes on with it as its old pod (ResumeSucceed, and patched naming it),
// so preUpgrade backs it up. Before, it was patched with no pod, and its
// upgrade went on without a backup.
func TestUnpausedAfterItsAdmissionWaitsForItsPod(t *testing.T) {
	startPatcher(t)
	ctx := context.Background()
	ns := testenv.Get(t).Namespace(t)
	ops, sb := claimed(t, ns, "sbx-unpaused", withBackup)
	sb.Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger] = "true"
	sb, err := client(t).AgentsV1alpha1().Sandboxes(ns).Update(ctx, sb, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := subscribe(t, ns)
	request(t, ops, sb)
	select {
	case ev := <-out:
		t.Fatalf("%s %q before the sandbox had a pod, want nothing until it has one", ev.Type, ev.Data.Message)
	case <-time.After(5 * time.Second):
	}
	templateUnchanged(t, sb)

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sb.Name, Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox"))}}}
	pod.Spec = sb.Spec.Template.Spec
	if pod, err = testenv.Get(t).Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-out:
		if ev.Type != events.TypePatched || ev.Data.OldPodUID != pod.UID {
			t.Fatalf("%s %q naming pod %s, want patched naming the pod %s", ev.Type, ev.Data.Message, ev.Data.OldPodUID, pod.UID)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no event within 60s of the pod's creation")
	}
}

// A request sent again (a redelivery, a watchdog's re-drive) after an earlier
// delivery patched the sandbox while it had a pod files nothing when the pod
// is gone: hookrunner has that pod's patched, and UpgradePod may be replacing
// the pod right now, so a PreUpgradeFailed could overtake its prehook-done.
func TestRequestAgainAfterAPatchWithAPodFilesNothing(t *testing.T) {
	startPatcher(t)
	ns := testenv.Get(t).Namespace(t)
	ops, sb := claimed(t, ns, "sbx-again", withBackup)
	sb.Annotations[upgrade.AnnotationOriginalTemplate] = `{"spec":{"containers":[{"name":"sandbox","image":"` + oldImage + `"}]}}`
	sb.Annotations[upgrade.AnnotationOriginalTemplateFor] = string(ops.UID)
	sb, err := client(t).AgentsV1alpha1().Sandboxes(ns).Update(context.Background(), sb, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := subscribe(t, ns)
	request(t, ops, sb)
	select {
	case ev := <-out:
		t.Fatalf("%s %s %q, want nothing", ev.Type, ev.Data.Reason, ev.Data.Message)
	case <-time.After(5 * time.Second):
	}
}

// The resume of a sandbox whose upgrade failed before its backup
// (PreUpgradeFailed, no attempt of the chain got further) and that has no
// pod now fails PreUpgrade too. Before, it went on at UpgradePod
// (upgrade.ResumeAt: no pod), with no backup ever taken of what its volumes
// hold, and postUpgrade restored an older one over it.
func TestResumeBeforeTheBackupWithNoPodFailsPreUpgrade(t *testing.T) {
	startPatcher(t)
	ctx := context.Background()
	ns := testenv.Get(t).Namespace(t)
	ops, sb := claimed(t, ns, "sbx-resume", withBackup)
	sb.Annotations[upgrade.AnnotationResumes] = upgrade.ResumesValue(string(ops.UID), "failed-1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed)
	sb, err := client(t).AgentsV1alpha1().Sandboxes(ns).Update(ctx, sb, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb = showAttempt(t, sb, "failed-1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed)
	out := subscribe(t, ns)
	request(t, ops, sb, func(d *events.Data) {
		d.ResumedAttempt, d.ResumedReason = "failed-1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed
	})
	select {
	case ev := <-out:
		if ev.Type != events.TypeFailed || ev.Data.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed ||
			!strings.Contains(ev.Data.Message, "the upgrade this one resumes failed before its backup") {
			t.Fatalf("%s %s %q (stage %s), want PreUpgradeFailed saying there is no backup to go on from", ev.Type, ev.Data.Reason, ev.Data.Message, ev.Data.Stage)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20s of requested")
	}
	templateUnchanged(t, sb)
}

// A request sent again (a watchdog's re-drive) for the resume of a paused
// sandbox whose status shows the wake-up done (ResumeSucceed), whose pod is
// gone since, does not wait for a wake-up again: podcycler builds it no pod
// past Resuming. It fails at once, as any resume before its backup with no
// pod does. Before, it waited the whole wake timeout and then said the woken
// pod would not be Ready.
func TestResumeWokenBeforeDoesNotWaitForAWakeAgain(t *testing.T) {
	startPatcher(t)
	ctx := context.Background()
	ns := testenv.Get(t).Namespace(t)
	ops, sb := claimed(t, ns, "sbx-woken", withBackup)
	sb.Spec.Paused = true
	sb.Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger] = "true"
	sb.Annotations[upgrade.AnnotationResumes] = upgrade.ResumesValue(string(ops.UID), "failed-1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed)
	sb, err := client(t).AgentsV1alpha1().Sandboxes(ns).Update(ctx, sb, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb = showAttempt(t, sb, string(ops.UID), agentsv1alpha1.UpgradingReasonResumeSucceed)
	out := subscribe(t, ns)
	request(t, ops, sb, func(d *events.Data) {
		d.ResumedAttempt, d.ResumedReason = "failed-1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed
		d.Redrive = 1
	})
	select {
	case ev := <-out:
		if ev.Type != events.TypeFailed || ev.Data.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed ||
			!strings.Contains(ev.Data.Message, "the upgrade this one resumes failed before its backup") {
			t.Fatalf("%s %s %q, want PreUpgradeFailed saying there is no pod to back up", ev.Type, ev.Data.Reason, ev.Data.Message)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20s of requested: waiting for a wake-up that was done already")
	}
	templateUnchanged(t, sb)
}

// showAttempt writes sb's status as statusagg would show attempt at reason
// (withAttempt, its conditions stamped now) and returns the stored sandbox.
func showAttempt(t *testing.T, sb *agentsv1alpha1.Sandbox, attempt, reason string) *agentsv1alpha1.Sandbox {
	t.Helper()
	shown := withAttempt(sb, attempt, reason)
	for i := range shown.Status.Conditions {
		shown.Status.Conditions[i].LastTransitionTime = metav1.Now()
	}
	out, err := client(t).AgentsV1alpha1().Sandboxes(sb.Namespace).UpdateStatus(context.Background(), shown, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
