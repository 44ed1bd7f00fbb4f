package hookrunner

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"molt.dev/pkg/events"
)

// What follows a hook that succeeded: its report, and whether it counts.

// reportWait bounds the report of a hook that succeeded while the process
// runs on (NATS down, then back); reportRetry is how soon a report NATS
// refused is sent again.
const (
	reportWait  = 5 * time.Minute
	reportRetry = time.Second
)

// reportTry bounds one send of the report: a send whose answer was lost (NATS
// died after it took the message) would otherwise wait the whole reportWait,
// holding the sandbox, while a send again is answered at once (the stream
// drops the duplicate). A variable for the tests.
var reportTry = 5 * time.Second

// finishing returns the context of what must follow a hook that succeeded:
// it ends max after now, or wait after ctx ends (the process shuts down),
// whichever comes first.
func finishing(ctx context.Context, wait, max time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithTimeout(context.WithoutCancel(ctx), max)
	go func() {
		select {
		case <-ctx.Done():
		case <-out.Done():
			return
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-out.Done():
		}
	}()
	return out, cancel
}

// publishPatiently publishes ev, each send bounded by reportTry, again
// every reportRetry while NATS does not take it, until ctx ends.
func (h *HookRunner) publishPatiently(ctx context.Context, ev events.Event) error {
	for {
		try, cancel := context.WithTimeout(ctx, reportTry)
		err := h.publish(try, ev)
		cancel()
		if err == nil {
			return nil
		}
		klog.FromContext(ctx).Info("The hook succeeded but NATS did not take its report; trying again", "err", err, "retryIn", reportRetry)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(reportRetry):
		}
	}
}

// lostDuringHook says why st's hook, which succeeded on pod, does not count
// ("" when it does): for postUpgrade, the pod was deleted (or is being
// deleted) while it ran, and what it restored went with it. preUpgrade's
// backup is made outside the pod and stands.
func (h *HookRunner) lostDuringHook(ctx context.Context, pod *corev1.Pod, st step) string {
	if st != postStep {
		return ""
	}
	now, err := h.kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		// Not known: the hook ran to success, and a redelivery would have to
		// wait for the API server too (hookPod). Reported as it ran.
		klog.FromContext(ctx).Info("Could not look at the pod again after postUpgrade; reporting it done", "pod", klog.KObj(pod), "err", err)
		return ""
	case now.UID == pod.UID && now.DeletionTimestamp == nil:
		return ""
	}
	return fmt.Sprintf("pod %s/%s (uid %s) was deleted while postUpgrade ran in it: the hook exited 0, but what it restored went with the pod, so the upgrade does not count as done. Create a new SandboxUpdateOps to resume: it runs postUpgrade again, on a rebuilt pod; if your postUpgrade deletes its backup once restored (as guide 000's does), restore it by hand instead, from wherever preUpgrade copied it",
		pod.Namespace, pod.Name, pod.UID)
}
