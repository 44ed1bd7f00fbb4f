package integration

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// The new pod an attempt built, deleted while the sandbox is in UpgradePod
// (by hand, an eviction), is told of in a Warning Event NewPodDeleted on the
// sandbox: podcycler builds it again, and a walk found nothing else said so.
// An original pod deleted then is not that pod, and gets no such Event.
func TestNewPodDeletedInUpgradePodIsTold(t *testing.T) {
	h := start(t)
	ns := h.env.Namespace(t)
	claimed := map[string]string{agentsv1alpha1.LabelUpdateOps: "ops-np"}
	sb := h.runningSandbox(ns, "np", claimed)
	ops := h.createOps(ns, "ops-np", imageV2, 1)
	for _, typ := range []string{events.TypeRequested, events.TypePreHookDone} {
		h.publish(event(typ, sb, ops))
	}
	h.waitSandbox(ns, "np", "Upgrading/UpgradePod", func(sb *agentsv1alpha1.Sandbox) bool {
		return upgrading(sb, agentsv1alpha1.UpgradingReasonUpgradePod)
	})
	ctx := context.Background()
	pods := h.env.Kube.CoreV1().Pods(ns)
	// The original pod goes (podcycler's replace): no Event.
	if err := pods.Delete(ctx, "np", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, h, ns, "np")
	// The attempt's new pod, then deleted by hand.
	pod := h.createPod(sb)
	mark := []byte(`{"metadata":{"annotations":{"` + upgrade.AnnotationPodAttempt + `":"` + string(ops.UID) + `"}}}`)
	if _, err := pods.Patch(ctx, "np", types.MergePatchType, mark, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "np", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e := h.waitEvent(ns, "np", "NewPodDeleted", string(pod.UID))
	if e.Type != "Warning" || e.Count > 1 {
		t.Errorf("Event %s/%s count %d: %q; want one Warning", e.Type, e.Reason, e.Count, e.Message)
	}
	list, err := h.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range list.Items {
		if ev.Reason == "NewPodDeleted" && ev.Message != e.Message {
			t.Errorf("NewPodDeleted for another pod (the original?): %q", ev.Message)
		}
	}
}

func waitPodGone(t *testing.T, h *harness, ns, name string) {
	t.Helper()
	testenv.Eventually(t, timeout, "pod "+ns+"/"+name+" gone", func() (bool, error) {
		_, err := h.env.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}
