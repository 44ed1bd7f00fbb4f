package podcycler_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
)

// A re-driven prehook-done for an attempt whose status still shows PreUpgrade is not
// the watchdog's, which re-drives only the stage the status shows (DESIGN rule 14): it
// came with statusagg's NATS password from someone else, and acted on, it would
// replace the pod before its backup. It is acknowledged and the pod kept. Once the
// status shows UpgradePod, a re-drive replaces the pod as the watchdog's does.
func TestRedriveOfAStageTheStatusDoesNotShowIsRefused(t *testing.T) {
	startPodcycler(t)
	r := startUpgrade(t, "sbx-redrive-early", func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/sandbox:v2" })
	setUpgradeStatus(t, r.ns, r.name, testAttempt, agentsv1alpha1.UpgradingReasonPreUpgrade)
	started := r.bus.subscribe(t, r.ns, r.name, events.TokenStageStarted)
	ready := r.bus.subscribe(t, r.ns, r.name, events.TokenPodReady)

	redrive := r.prehook
	redrive.Type, redrive.Data.Redrive = events.TypeRedrivePreHookDone, 1
	r.bus.waitHandled(t, r.bus.redeliver(t, redrive))
	if got := r.pods.of(r.name); len(got) != 0 {
		t.Fatalf("pods created by a re-drive while the status shows PreUpgrade: %v, want none", got)
	}
	if pod := waitPodReady(t, r.ns, r.name, ""); pod.UID != r.oldPod.UID {
		t.Fatalf("pod replaced before its backup: %s → %s", r.oldPod.UID, pod.UID)
	}
	select {
	case st := <-started:
		t.Fatalf("stage-started %s published after a refused re-drive, want none", st.Data.Stage)
	case ev := <-ready:
		t.Fatalf("pod-ready for %s published after a refused re-drive, want none", ev.Data.NewPodUID)
	default:
	}

	setUpgradeStatus(t, r.ns, r.name, testAttempt, agentsv1alpha1.UpgradingReasonUpgradePod)
	redrive.Data.Redrive = 2
	r.bus.redeliver(t, redrive)
	ev := next(t, ready, "pod-ready", 60*time.Second)
	pod := waitPodReady(t, r.ns, r.name, string(r.oldPod.UID))
	if ev.Data.NewPodUID != pod.UID || ev.Data.Redrive != 2 {
		t.Fatalf("pod-ready for pod %s, re-drive %d; want the new pod %s, re-drive 2", ev.Data.NewPodUID, ev.Data.Redrive, pod.UID)
	}
	if got := r.pods.of(r.name); len(got) != 1 {
		t.Fatalf("pods created = %v, want one", got)
	}
}
