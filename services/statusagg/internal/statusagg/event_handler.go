package statusagg

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// maxWriteTries bounds the reload-and-redo rounds of one event; beyond it the
// message is retried later by the consumer.
const maxWriteTries = 5

// outcome is what recording one event did: either a skip reason, or the
// transition written and the sandbox as written.
type outcome struct {
	skip    string
	tr      transition
	written *agentsv1alpha1.Sandbox
}

// handleEvent records one upgrade event on its sandbox:
//  1. decode (done by events.Consume) and record it against the sandbox,
//     reading from the cache first and from the API server when a write
//     conflicts or the cache says "skip" (the cache may lag behind the
//     selector's label or a newer status);
//  2. act: the status write of recordEvent;
//  3. record: stage duration and failure metrics, and a Kubernetes Event
//     for an attempt's start, success or failure — only after the write;
//  4. enqueue the namespace's ops, whose counters may have moved.
func (s *server) handleEvent(ctx context.Context, msg *events.Message) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("stage", msg.Event.Data.Stage))
	return s.apply(ctx, msg.Event)
}

// apply records ev as handleEvent does; the watchdog calls it directly with
// the failure it decides, so a stalled attempt ends even without a stream.
func (s *server) apply(ctx context.Context, ev events.Event) error {
	logger := klog.FromContext(ctx)
	var out outcome
	var err error
	for try := 0; try < maxWriteTries; try++ {
		out, err = s.recordEvent(ctx, ev, try > 0)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return err
		}
		if out.skip != "" && try == 0 {
			continue // the cache may lag: confirm a skip against the API server
		}
		break
	}
	if err != nil {
		return fmt.Errorf("record event on sandbox %s: %w", ev.SandboxKey(), err)
	}
	if out.skip != "" {
		logger.V(2).Info("Skip event", "why", out.skip)
		return nil
	}
	logger.V(2).Info("Recorded upgrade stage", "from", out.tr.From, "to", out.tr.To, "newAttempt", out.tr.New)
	s.metrics.observeTransition(s.clock, ev.SandboxKey(), out.tr, ev.Time)
	s.announce(out.written, out.tr)
	s.enqueueOpsOf(ev.Data.Sandbox.Namespace)
	return nil
}

// recordEvent loads the sandbox, decides the event's transition and writes
// it with the recomputed status. It returns a skip reason when the event
// changes nothing, and a conflict error when the sandbox changed meanwhile.
func (s *server) recordEvent(ctx context.Context, ev events.Event, fresh bool) (outcome, error) {
	d := ev.Data
	sb, err := s.loadSandbox(ctx, d.Sandbox.Namespace, d.Sandbox.Name, fresh)
	switch {
	case err != nil:
		return outcome{}, err
	case sb == nil:
		return outcome{skip: "sandbox is gone"}, nil
	case sb.UID != d.Sandbox.UID:
		return outcome{skip: fmt.Sprintf("sandbox was replaced (uid %s, event for %s)", sb.UID, d.Sandbox.UID)}, nil
	}
	if d.Ops.Name != "" {
		if claimed := sb.Labels[agentsv1alpha1.LabelUpdateOps]; claimed != d.Ops.Name {
			return outcome{skip: fmt.Sprintf("sandbox is claimed by ops %q, not %q", claimed, d.Ops.Name)}, nil
		}
		if ops, err := s.ops.SandboxUpdateOps(sb.Namespace).Get(d.Ops.Name); err == nil && ops.UID != d.Ops.UID {
			return outcome{skip: fmt.Sprintf("ops %s was replaced (uid %s, event for %s)", d.Ops.Name, ops.UID, d.Ops.UID)}, nil
		}
	}
	target, err := stageOf(ev, sb)
	if err != nil {
		return outcome{}, events.Permanent(fmt.Errorf("map event to a stage: %w", err))
	}
	curReason, _ := upgrade.ReasonFor(sb, upgrade.CurrentAttempt(sb))
	tr, skip := decide(upgrade.CurrentAttempt(sb), curReason, ev, target)
	if skip != "" {
		return outcome{skip: skip}, nil
	}

	upd := sb.DeepCopy()
	recordTransition(&upd.Status.Conditions, tr, sb.Generation, metav1.Now())
	upd.Status = desiredSandboxStatus(upd, s.podOf(sb))
	if equality.Semantic.DeepEqual(sb.Status, upd.Status) {
		return outcome{skip: "status already records " + tr.To}, nil
	}
	written, err := s.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return outcome{skip: "sandbox is gone"}, nil
	case err != nil && !apierrors.IsConflict(err):
		return outcome{}, fmt.Errorf("update status of sandbox %s: %w", ev.SandboxKey(), err)
	case err != nil:
		return outcome{}, err
	}
	return outcome{tr: tr, written: written}, nil
}

// loadSandbox reads the sandbox from the informer cache, or from the API
// server when fresh; nil when it does not exist.
func (s *server) loadSandbox(ctx context.Context, ns, name string, fresh bool) (*agentsv1alpha1.Sandbox, error) {
	var sb *agentsv1alpha1.Sandbox
	var err error
	if fresh {
		sb, err = s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
	} else {
		sb, err = s.sandboxes.Sandboxes(ns).Get(name)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %s/%s: %w", ns, name, err)
	}
	return sb, nil
}

// announce records the Kubernetes Event of a written transition: the start
// of an attempt, its success or its failure.
func (s *server) announce(sb *agentsv1alpha1.Sandbox, tr transition) {
	by := "a direct upgrade (spec.upgradePolicy)"
	if ops := sb.Labels[agentsv1alpha1.LabelUpdateOps]; ops != "" {
		by = "SandboxUpdateOps " + ops
	}
	if tr.New {
		s.recorder.Eventf(sb, corev1.EventTypeNormal, EventUpgradeStarted, "upgrade by %s started at %s (attempt %s)", by, tr.To, tr.Attempt)
	}
	switch {
	case agentsv1alpha1.IsUpgradingFailedReason(tr.To):
		// The failed reason is the Event's reason, as upstream's, so alerts on
		// reason=UpgradePodFailed keep working.
		s.recorder.Eventf(sb, corev1.EventTypeWarning, tr.To, "upgrade by %s failed in %s: %s", by, upgrade.StageOfFailure(tr.To), tr.Message)
	case tr.To == agentsv1alpha1.UpgradingReasonSucceeded:
		s.recorder.Eventf(sb, corev1.EventTypeNormal, EventUpgradeSucceeded, "upgrade by %s succeeded (attempt %s)", by, tr.Attempt)
	}
}
