package podcycler_test

import (
	"context"
	"testing"
	"time"

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
