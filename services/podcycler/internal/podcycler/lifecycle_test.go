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

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A sandbox gets its pod (labels, annotations, owner reference as specified); pausing
// deletes the pod, resuming creates a new one.
func TestSandboxGetsPodAndPauseResume(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	startPodcycler(t)

	sb := createSandbox(t, ns, "sbx-life", "registry.example/sandbox:v1")
	pod := waitPodReady(t, ns, sb.Name, "")

	revision, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Labels[agentsv1alpha1.LabelPodTemplateHash]; got != revision {
		t.Errorf("pod-template-hash = %q, want %q", got, revision)
	}
	if pod.Labels["app"] != "demo" || pod.Annotations["demo/note"] != "kept" {
		t.Errorf("template labels/annotations not carried: labels %v annotations %v", pod.Labels, pod.Annotations)
	}
	if _, ok := pod.Annotations[upgrade.AnnotationPodAttempt]; ok {
		t.Errorf("lifecycle pod carries %s: %v", upgrade.AnnotationPodAttempt, pod.Annotations)
	}
	if pod.Spec.Containers[0].Image != "registry.example/sandbox:v1" {
		t.Errorf("image = %q", pod.Spec.Containers[0].Image)
	}
	ref := metav1.GetControllerOf(pod)
	switch {
	case ref == nil:
		t.Fatalf("pod has no controller reference: %v", pod.OwnerReferences)
	case ref.APIVersion != "agents.kruise.io/v1alpha1" || ref.Kind != "Sandbox" || ref.Name != sb.Name || ref.UID != sb.UID:
		t.Errorf("controller reference = %+v, want Sandbox %s uid %s", ref, sb.Name, sb.UID)
	case ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion:
		t.Errorf("controller reference does not block owner deletion: %+v", ref)
	}

	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) { s.Spec.Paused = true })
	waitPodGone(t, ns, sb.Name)

	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) { s.Spec.Paused = false })
	resumed := waitPodReady(t, ns, sb.Name, string(pod.UID))
	if resumed.UID == pod.UID {
		t.Fatalf("resumed pod has the old UID %s", pod.UID)
	}
}

// A sandbox its user pauses while its upgrade attempt is in a stage keeps its pod until the
// attempt ends, then stops like any paused sandbox: stopping it mid-stage would fail the
// stage for nothing (a hook with no pod, a new pod deleted as each re-drive creates it).
func TestPauseWaitsForTheAttemptInAStage(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	startPodcycler(t)

	sb := createSandbox(t, ns, "sbx-pause-mid", "registry.example/sandbox:v1")
	pod := waitPodReady(t, ns, sb.Name, "")
	setUpgradeStatus(t, ns, sb.Name, "a1", agentsv1alpha1.UpgradingReasonPreUpgrade)
	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) { s.Spec.Paused = true })
	testenv.Consistently(t, 3*time.Second, "pod "+ns+"/"+sb.Name+" kept while the attempt is in PreUpgrade", func() (bool, error) {
		p, err := env.Kube.CoreV1().Pods(ns).Get(context.Background(), sb.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.UID == pod.UID && p.DeletionTimestamp == nil, nil
	})

	setUpgradeStatus(t, ns, sb.Name, "a1", agentsv1alpha1.UpgradingReasonSucceeded)
	waitPodGone(t, ns, sb.Name)
}

// A sandbox whose attempt failed in PreUpgrade after its template was patched gets, when
// it is unpaused (or its pod is deleted), a plain pod of the template kept from before the
// patch: no preUpgrade has backed up its workspace, and a pod of the patched template
// would start on its volumes first, taken by the resume for the failed attempt's new pod.
// Once the copy no longer holds (the attempt got past PreUpgrade), spec.template is
// built again.
func TestPodOfAFailedPreUpgradeRunsTheOriginalTemplate(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	startPodcycler(t)
	const v1, v2 = "registry.example/sandbox:v1", "registry.example/sandbox:v2"

	sb := createSandbox(t, ns, "sbx-orig", v1)
	waitPodReady(t, ns, sb.Name, "")
	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) { s.Spec.Paused = true })
	waitPodGone(t, ns, sb.Name)
	// What the patcher and statusagg leave: the patch (v2) in spec.template, v1 kept
	// for the attempt, the attempt failed in PreUpgrade.
	original, ok := upgrade.OriginalTemplateValue(sb.Spec.Template)
	if !ok {
		t.Fatal("the template cannot be kept")
	}
	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) {
		s.Spec.Template.Spec.Containers[0].Image = v2
		s.Annotations = map[string]string{upgrade.AnnotationOriginalTemplate: original, upgrade.AnnotationOriginalTemplateFor: "a1"}
	})
	setUpgradeStatus(t, ns, sb.Name, "a1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed)

	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) { s.Spec.Paused = false })
	pod := waitPodReady(t, ns, sb.Name, "")
	revision, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	if img, rev := pod.Spec.Containers[0].Image, pod.Labels[agentsv1alpha1.LabelPodTemplateHash]; img != v1 || rev != revision {
		t.Errorf("pod of the unpaused sandbox: image %s, revision %s; want the kept template (%s, %s)", img, rev, v1, revision)
	}
	if a, ok := pod.Annotations[upgrade.AnnotationPodAttempt]; ok {
		t.Errorf("pod of the unpaused sandbox carries %s=%s: a resume would take it for the failed attempt's new pod and skip preUpgrade", upgrade.AnnotationPodAttempt, a)
	}

	// A later attempt got past PreUpgrade (then failed): the copy no longer holds.
	setUpgradeStatus(t, ns, sb.Name, "a1", agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	if err := env.Kube.CoreV1().Pods(ns).Delete(context.Background(), sb.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}); err != nil {
		t.Fatal(err)
	}
	again := waitPodReady(t, ns, sb.Name, string(pod.UID))
	if img := again.Spec.Containers[0].Image; img != v2 {
		t.Errorf("pod after the attempt got past PreUpgrade: image %s, want spec.template's %s", img, v2)
	}
}

// A pod built for a sandbox whose last attempt failed before its backup (in
// PreUpgrade before the patch was written, so no original template is kept;
// a CheckpointRestore refused for its image before preUpgrade, with no
// strategy mark) is a plain pod: it holds the workspace from then on, and a
// resume must back it up. Stamped with the failed attempt, a resume would
// take it for the attempt's new pod, skip preUpgrade and delete it. A pod
// built after an UpgradePodFailed is the attempt's, and so is one built after
// an attempt that continued an UpgradePodFailed failed in PreUpgrade (the pod
// lost was the chain's new pod: backed up, it would overwrite the good
// backup), and one built after an ops's CheckpointFailed past its preUpgrade
// hook (the strategy mark written: its backup is the good one, and the lost
// pod took the workspace with it).
func TestPodOfAnAttemptFailedBeforeUpgradePodIsPlain(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	startPodcycler(t)
	for i, tc := range []struct {
		reason, resumes, strategy string
		backs, stamped            bool
	}{
		{agentsv1alpha1.UpgradingReasonPreUpgradeFailed, "", "", true, false},
		{agentsv1alpha1.UpgradingReasonCheckpointFailed, "", "", true, false},
		{agentsv1alpha1.UpgradingReasonCheckpointFailed, "", upgrade.StrategyValue("a0"), true, false},
		{agentsv1alpha1.UpgradingReasonCheckpointFailed, "", upgrade.StrategyValue("a1"), false, false}, // no backup taken
		{agentsv1alpha1.UpgradingReasonCheckpointFailed, "", upgrade.StrategyValue("a1"), true, true},
		{agentsv1alpha1.UpgradingReasonUpgradePodFailed, "", "", false, true},
		{agentsv1alpha1.UpgradingReasonPreUpgradeFailed, "a1 a0 " + agentsv1alpha1.UpgradingReasonUpgradePodFailed, "", false, true},
	} {
		sb := createSandbox(t, ns, fmt.Sprintf("sbx-before-%d", i), "registry.example/sandbox:v1")
		pod := waitPodReady(t, ns, sb.Name, "")
		if tc.resumes != "" || tc.strategy != "" || tc.backs {
			updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) {
				s.Annotations = map[string]string{}
				if tc.resumes != "" {
					s.Annotations[upgrade.AnnotationResumes] = tc.resumes
				}
				if tc.strategy != "" {
					s.Annotations[upgrade.AnnotationUpgradeStrategy] = tc.strategy
				}
				if tc.backs {
					s.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{
						Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/sh", "-c", "tar -czf /backup/ws.tgz -C /workspace ."}}}}
				}
			})
		}
		setUpgradeStatus(t, ns, sb.Name, "a1", tc.reason)
		if err := env.Kube.CoreV1().Pods(ns).Delete(context.Background(), sb.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}); err != nil {
			t.Fatal(err)
		}
		again := waitPodReady(t, ns, sb.Name, string(pod.UID))
		a, stamped := again.Annotations[upgrade.AnnotationPodAttempt]
		switch {
		case tc.stamped && a != "a1":
			t.Errorf("%s (resumes %q, strategy %q, preUpgrade %v): pod built after the attempt (or its chain) replaced the pod or took its backup carries attempt %q, want a1", tc.reason, tc.resumes, tc.strategy, tc.backs, a)
		case !tc.stamped && stamped:
			t.Errorf("%s (strategy %q, preUpgrade %v): pod built for the lost pod carries %s=%s: a resume would skip its backup and delete it", tc.reason, tc.strategy, tc.backs, upgrade.AnnotationPodAttempt, a)
		}
	}

	// A paused sandbox whose wake-up failed (filed under PreUpgradeFailed),
	// admitted by the next ops before statusagg records it: the pod that
	// wakes it is plain, so that ops backs it up first.
	sb := createSandbox(t, ns, "sbx-woken-again", "registry.example/sandbox:v1")
	waitPodReady(t, ns, sb.Name, "")
	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) { s.Spec.Paused = true })
	waitPodGone(t, ns, sb.Name)
	setUpgradeStatus(t, ns, sb.Name, "a1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed)
	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[agentsv1alpha1.LabelUpdateOps] = "ops2"
		s.Annotations = map[string]string{
			upgrade.AnnotationClaim:                       upgrade.ClaimValue("ops2", "a2"),
			upgrade.AnnotationResumes:                     upgrade.ResumesValue("a2", "a1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed),
			agentsv1alpha1.AnnotationUpgradeResumeTrigger: "true",
		}
	})
	woken := waitPodReady(t, ns, sb.Name, "")
	if a, ok := woken.Annotations[upgrade.AnnotationPodAttempt]; ok {
		t.Errorf("the pod that wakes the sandbox for the next ops carries %s=%s: that ops would skip its backup and delete it", upgrade.AnnotationPodAttempt, a)
	}
}

// A paused sandbox that an ops has admitted to resume a failed attempt from UpgradePod
// keeps the pod that attempt's handler builds, while the status does not show the
// attempt yet: stopped for the pause, it would be built a second time once the attempt is
// recorded. When the ops lets go of the sandbox first, the pause goes on.
func TestPauseLeavesThePodOfAnAdmittedAttempt(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	startPodcycler(t)

	sb := createSandbox(t, ns, "sbx-pause-admitted", "registry.example/sandbox:v1")
	pod := waitPodReady(t, ns, sb.Name, "")
	setUpgradeStatus(t, ns, sb.Name, "a1", agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) {
		s.Spec.Paused = true
		metav1.SetMetaDataLabel(&s.ObjectMeta, agentsv1alpha1.LabelUpdateOps, "ops2")
		metav1.SetMetaDataAnnotation(&s.ObjectMeta, upgrade.AnnotationClaim, "ops2 a2")
	})
	testenv.Consistently(t, 3*time.Second, "pod "+ns+"/"+sb.Name+" kept while attempt a2 is admitted and not recorded", func() (bool, error) {
		p, err := env.Kube.CoreV1().Pods(ns).Get(context.Background(), sb.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.UID == pod.UID && p.DeletionTimestamp == nil, nil
	})

	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) { delete(s.Labels, agentsv1alpha1.LabelUpdateOps) })
	waitPodGone(t, ns, sb.Name)
}

// A paused sandbox woken for an upgrade whose pod goes once the patcher has
// patched it gets no pod from the lifecycle loop while the status shows
// ResumeSucceed, or Resuming with the patch's mark (a status that lags while
// UpgradePod replaces the woken pod): a pod built then would be replaced as
// well, a second pod of the attempt. Once the attempt ends (failed here) it
// gets one as any sandbox does.
func TestWokenPodPastItsPatchIsLeftToTheStages(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	startPodcycler(t)
	const v1, v2 = "registry.example/sandbox:v1", "registry.example/sandbox:v2"

	for _, reason := range []string{agentsv1alpha1.UpgradingReasonResuming, agentsv1alpha1.UpgradingReasonResumeSucceed} {
		name := "sbx-woken-" + strings.ToLower(reason)
		sb := createSandbox(t, ns, name, v1)
		updateSandbox(t, ns, name, func(s *agentsv1alpha1.Sandbox) {
			s.Spec.Paused = true
			metav1.SetMetaDataLabel(&s.ObjectMeta, agentsv1alpha1.LabelUpdateOps, "ops1")
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, upgrade.AnnotationClaim, upgrade.ClaimValue("ops1", "a1"))
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, agentsv1alpha1.AnnotationUpgradeResumeTrigger, "true")
		})
		setUpgradeStatus(t, ns, name, "a1", reason)
		woken := waitPodReady(t, ns, name, "")
		// What the patcher writes once the woken pod is Ready.
		original, ok := upgrade.OriginalTemplateValue(sb.Spec.Template)
		if !ok {
			t.Fatal("the template cannot be kept")
		}
		updateSandbox(t, ns, name, func(s *agentsv1alpha1.Sandbox) {
			s.Spec.Template.Spec.Containers[0].Image = v2
			s.Annotations[upgrade.AnnotationOriginalTemplate] = original
			s.Annotations[upgrade.AnnotationOriginalTemplateFor] = "a1"
		})
		// UpgradePod deletes the woken pod while the status still shows reason.
		deleteWokenPodAndSeeNoneBuilt(t, ns, woken, "in "+reason+" past its patch")
		updateSandbox(t, ns, name, func(s *agentsv1alpha1.Sandbox) { s.Spec.Paused = false })
		setUpgradeStatus(t, ns, name, "a1", agentsv1alpha1.UpgradingReasonUpgradePodFailed)
		waitPodReady(t, ns, name, string(woken.UID))
	}
}

// The same for a woken sandbox whose attempt resumes one that failed in
// PreUpgrade (review): the selector moves the kept template to the resume at
// admission, so only the hooks the patcher pins say it has patched. While
// the status still shows the failed attempt, or the resume Resuming, a pod
// missing past that patch is UpgradePod's to build; one built here from the
// kept template would be replaced too, a second pod of the attempt.
func TestWokenPodPastAResumesPatchIsLeftToTheStages(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	startPodcycler(t)
	const v1, v2 = "registry.example/sandbox:v1", "registry.example/sandbox:v2"

	for _, shown := range []struct{ attempt, reason string }{
		{"a1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed},
		{"a2", agentsv1alpha1.UpgradingReasonResuming},
	} {
		name := "sbx-resume-" + strings.ToLower(shown.reason)
		sb := createSandbox(t, ns, name, v1)
		original, ok := upgrade.OriginalTemplateValue(sb.Spec.Template)
		if !ok {
			t.Fatal("the template cannot be kept")
		}
		// a1 patched v2 and failed in PreUpgrade (recorded first, as it is
		// long before a resume); ops2 admits the paused sandbox to wake it
		// for a2, which resumes a1.
		setUpgradeStatus(t, ns, name, shown.attempt, shown.reason)
		updateSandbox(t, ns, name, func(s *agentsv1alpha1.Sandbox) {
			s.Spec.Paused = true
			s.Spec.Template.Spec.Containers[0].Image = v2
			metav1.SetMetaDataLabel(&s.ObjectMeta, agentsv1alpha1.LabelUpdateOps, "ops2")
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, upgrade.AnnotationClaim, upgrade.ClaimValue("ops2", "a2"))
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, agentsv1alpha1.AnnotationUpgradeResumeTrigger, "true")
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, upgrade.AnnotationResumes, upgrade.ResumesValue("a2", "a1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed))
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, upgrade.AnnotationOriginalTemplate, original)
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, upgrade.AnnotationOriginalTemplateFor, "a2")
		})
		woken := waitPodReady(t, ns, name, "")
		if got := woken.Spec.Containers[0].Image; got != v1 {
			t.Fatalf("%s: woken pod runs %s, want the template from before a1's patch (%s)", name, got, v1)
		}
		// What the patcher writes once the woken pod is Ready.
		updateSandbox(t, ns, name, func(s *agentsv1alpha1.Sandbox) {
			s.Annotations[upgrade.AnnotationAttemptHooks] = upgrade.AttemptHooksValue("a2", nil)
		})
		// UpgradePod deletes the woken pod while the status still lags.
		deleteWokenPodAndSeeNoneBuilt(t, ns, woken, "past a2's patch")
		updateSandbox(t, ns, name, func(s *agentsv1alpha1.Sandbox) { s.Spec.Paused = false })
		setUpgradeStatus(t, ns, name, "a2", agentsv1alpha1.UpgradingReasonUpgradePodFailed)
		waitPodReady(t, ns, name, string(woken.UID))
	}
}

// deleteWokenPodAndSeeNoneBuilt deletes woken, as UpgradePod's handler does,
// and checks that the lifecycle loop builds no pod for its sandbox (when says
// in which state, for the failure).
func deleteWokenPodAndSeeNoneBuilt(t *testing.T, ns string, woken *corev1.Pod, when string) {
	t.Helper()
	kube := testenv.Get(t).Kube.CoreV1().Pods(ns)
	if err := kube.Delete(context.Background(), woken.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &woken.UID}}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, ns, woken.Name)
	testenv.Consistently(t, 3*time.Second, "no pod built for "+woken.Name+" "+when, func() (bool, error) {
		p, err := kube.Get(context.Background(), woken.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("pod %s (uid %s, image %s) built", p.Name, p.UID, p.Spec.Containers[0].Image)
	})
}
