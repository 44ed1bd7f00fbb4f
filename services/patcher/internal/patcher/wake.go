package patcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// The wake-up of a paused sandbox admitted to be upgraded: the wait for its
// pod, and its failure.

// waitAwake polls until the pod of the woken paused sandbox sb is Ready
// (podcycler creates it from the template as it is) and returns it, or
// returns why it will not be: a container that will not start by itself
// (upgrade.ContainerFailure: an image that does not pull, a crash loop) at
// once, else what it still waited for after wakeTimeout. The consume loop
// keeps the message alive meanwhile. The pod is stopped again with the
// pause once the attempt has failed, so the message carries the cause
// itself rather than a pod to describe. resumed is the failed attempt this
// one continues ("" when none): that attempt may have patched the template
// the pod is woken with, and a new ops cannot wake it past a bad one; or,
// when no preUpgrade has run since (upgrade.OriginalTemplate), the pod is
// woken with the template from before that patch, and the message says how
// to give that up. A sandbox deleted meanwhile ends the wait
// (errSandboxGone).
func (p *Patcher) waitAwake(ctx context.Context, sb *agentsv1alpha1.Sandbox, resumed string) (*corev1.Pod, string, error) {
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, p.wakeTimeout)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	_, original := upgrade.OriginalTemplate(sb)
	failed := func(why string) string {
		// A sandbox its user unpaused meanwhile is not paused again: it
		// keeps the pod it gets. Told as it is now, after a wait of up to
		// the wake timeout.
		again := "it is paused again"
		if !p.pausedNow(outer, sb) {
			again = "it was unpaused meanwhile and is not paused again"
		}
		if original {
			return fmt.Sprintf("the paused sandbox was woken for its upgrade with the template its pods ran before the patch of the failed upgrade this one resumes (attempt %s), as no preUpgrade has backed it up since (annotation %s), and its pod will not be Ready: %s; nothing was patched and %s: fix what keeps the pod from starting (its image, its resources, its node), then create a new SandboxUpdateOps; or, to give up that backup and wake it with its spec.template instead, remove the annotation (kubectl annotate sbx %s -n %s %s-), then create a new SandboxUpdateOps",
				resumed, upgrade.AnnotationOriginalTemplate, why, again, sb.Name, sb.Namespace, upgrade.AnnotationOriginalTemplateFor)
		}
		if resumed != "" {
			return fmt.Sprintf("the paused sandbox was woken for its upgrade with its template as it is, and its pod will not be Ready: %s; nothing was patched and %s. Its spec.template may still carry the patch of the failed upgrade this one resumes (attempt %s), and every new SandboxUpdateOps wakes it with that template first: fix spec.template by hand (kubectl edit sbx %s -n %s, e.g. the image the pod ran before), or fix what keeps the pod from starting (its image, its resources, its node), then create a new SandboxUpdateOps", why, again, resumed, sb.Name, sb.Namespace)
		}
		return fmt.Sprintf("the paused sandbox was woken for its upgrade with its template as it is, and its pod will not be Ready: %s; nothing was patched and %s: every new SandboxUpdateOps wakes it with that template first, so fix what keeps the pod from starting (its image or resources: kubectl edit sbx %s -n %s; or its node), then create a new SandboxUpdateOps", why, again, sb.Name, sb.Namespace)
	}
	last := "no pod was created for it yet"
	for polls := 1; ; polls++ {
		if polls%sandboxRecheckPolls == 0 && p.sandboxGone(ctx, sb) {
			return nil, "", errSandboxGone
		}
		pod, err := p.currentPod(ctx, sb)
		switch {
		case err != nil && ctx.Err() == nil:
			return nil, "", err
		case pod != nil && pod.DeletionTimestamp == nil && upgrade.ControlledBy(pod, sb.UID) && upgrade.PodReady(pod):
			return pod, "", nil
		case pod != nil && pod.DeletionTimestamp == nil && upgrade.ControlledBy(pod, sb.UID):
			if why, bad := upgrade.ContainerFailure(pod); bad {
				return nil, failed(fmt.Sprintf("pod %s (uid %s): %s", pod.Name, pod.UID, why)), nil
			}
			last = fmt.Sprintf("pod %s (uid %s) is not Ready: %s", pod.Name, pod.UID, upgrade.WaitingFor(pod))
		case pod != nil:
			last = fmt.Sprintf("pod %s (uid %s) is not its running pod yet", pod.Name, pod.UID)
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded && p.wakeTimeout > 0 {
				return nil, failed(fmt.Sprintf("not Ready within %s (--pod-ready-timeout): %s", p.wakeTimeout, last)), nil
			}
			return nil, "", ctx.Err()
		case <-tick.C:
		}
	}
}

// sandboxRecheckPolls: every this many polls (5 s) the wake-up looks
// whether its sandbox is still there.
const sandboxRecheckPolls = 10

// errSandboxGone ends a wake-up whose sandbox was deleted (or is being
// deleted, or was created again under its name) meanwhile: its pod will
// never be Ready for it, and waiting out the wake timeout would hold one of
// the patcher's workers for nothing (a namespace deleted with many woken
// sandboxes in it would hold them all). statusagg tells the deletion.
var errSandboxGone = errors.New("the sandbox was deleted during its wake-up")

// sandboxGone reports whether sb is gone, being deleted, or replaced by a
// sandbox of the same name, as the API server has it now (false when it
// cannot be read: the wait goes on).
func (p *Patcher) sandboxGone(ctx context.Context, sb *agentsv1alpha1.Sandbox) bool {
	cur, err := p.sandboxNow(ctx, sb)
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		return false
	}
	return cur.UID != sb.UID || cur.DeletionTimestamp != nil
}

// sandboxNow reads sb as the API server has it now, waiting at most 5 s.
func (p *Patcher) sandboxNow(ctx context.Context, sb *agentsv1alpha1.Sandbox) (*agentsv1alpha1.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return p.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Get(ctx, sb.Name, metav1.GetOptions{})
}

// pausedNow reports whether sb is paused as the API server has it now (as
// read before, when it cannot be read).
func (p *Patcher) pausedNow(ctx context.Context, sb *agentsv1alpha1.Sandbox) bool {
	cur, err := p.sandboxNow(ctx, sb)
	if err != nil || cur.UID != sb.UID {
		return sb.Spec.Paused
	}
	return cur.Spec.Paused
}

// failWake files a failed wake-up under Resuming's failure reason.
func (p *Patcher) failWake(ctx context.Context, in events.Event, message string) error {
	klog.FromContext(ctx).Info("sandbox failed", "message", message)
	return p.publish(ctx, in, events.TypeFailed, func(out *events.Data) {
		out.Stage = agentsv1alpha1.UpgradingReasonResuming
		out.Reason = upgrade.FailedReason(agentsv1alpha1.UpgradingReasonResuming)
		out.Message = agentsv1alpha1.TruncateConditionMessage(message)
	})
}

// pausedAgain is what a failure before the patch adds for a paused sandbox
// woken for the upgrade: its pod stops again with the pause ("" otherwise).
func pausedAgain(sb *agentsv1alpha1.Sandbox) string {
	if sb.Spec.Paused && upgrade.AdmittedToWake(sb) {
		return " (it was woken for the upgrade and is paused again)"
	}
	return ""
}
