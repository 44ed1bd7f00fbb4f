package selector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// admitWorkers bounds the label patches of one sync in flight at once: a
// batch is labelled in about the time of one patch.
const admitWorkers = 32

// admit starts the candidates that fit in the budget (Selection.ToAdmit):
//  1. label each with the ops, up to admitWorkers at once (against the
//     resourceVersion the decision was made on; a conflict requeues the ops);
//  2. publish `requested` for each labelled one, in name order (API.md:
//     candidates are started in name order). A sandbox is published only
//     after its label is written; a crash between the two is recovered by
//     republish.
//
// The first error is returned once every label patch started has ended and
// the labelled sandboxes before it are published.
func (s *Selector) admit(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, toAdmit []upgrade.Candidate) error {
	labelled := make([]string, len(toAdmit)) // the written resourceVersion; "" if not labelled
	refused := make([]string, len(toAdmit))  // the API server's words when it refused the claim for good
	// Not errgroup.WithContext: one failed patch must not cancel the others
	// mid-flight, since the API server may apply a cancelled patch all the
	// same, and a claim this process does not know of would be neither
	// published nor counted until the cache shows it.
	var g errgroup.Group
	g.SetLimit(admitWorkers)
	for i, c := range toAdmit {
		g.Go(func() error {
			version, err := s.label(ctx, ops, c)
			if words := upgrade.Refusal(err); words != "" {
				// Refused for good: retried, it would hold the ops in Updating
				// for ever. Recorded on the ops below, and not tried again.
				refused[i] = words
				return nil
			}
			labelled[i] = version
			return err
		})
	}
	labelErr := g.Wait()
	if err := s.recordClaimRefused(ctx, ops, toAdmit, refused); err != nil {
		labelErr = errors.Join(labelErr, err)
	}
	for i, c := range toAdmit {
		if labelled[i] == "" {
			continue
		}
		if err := s.publishRequested(ctx, ops, c.Sandbox, labelled[i]); err != nil {
			return err
		}
		klog.FromContext(ctx).Info("Admitted sandbox", "sandbox", klog.KObj(c.Sandbox), "resume", c.Resume, "phase", c.Sandbox.Status.Phase)
	}
	return labelErr
}

// recordClaimRefused adds the candidates whose claim the API server refused
// (refused[i], "" for the others) to the ops's upgrade.AnnotationClaimRefused,
// in one merge patch of the annotation: only this process writes it, and
// one lost to a stale read is refused and written again at the next sync.
func (s *Selector) recordClaimRefused(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, toAdmit []upgrade.Candidate, refused []string) error {
	add := map[string]string{}
	for i, words := range refused {
		if words != "" {
			add[toAdmit[i].Sandbox.Name] = words
		}
	}
	if len(add) == 0 {
		return nil
	}
	value, changed := upgrade.WithClaimRefused(ops, add)
	if !changed {
		return nil
	}
	patch := metaPatch{Metadata: metaFields{Annotations: map[string]*string{upgrade.AnnotationClaimRefused: ptr(value)}}}
	if _, err := s.client.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).Patch(ctx, ops.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("record on ops %s/%s that the API server refuses to let it claim %s: %w", ops.Namespace, ops.Name, upgrade.Sandboxes(len(add)), err)
	}
	klog.FromContext(ctx).Info("The API server refuses the claim of sandboxes; recorded on the ops, not tried again by it", "refused", add)
	return nil
}

// directPendingRecheck is how soon an ops looks again at a sandbox it held
// back for a direct upgrade statusagg has not recorded (the record itself
// requeues the ops too).
const directPendingRecheck = 5 * time.Second

// label writes the ops label (and the resume annotations) on one candidate
// and returns the written sandbox's resourceVersion; "" when the sandbox is
// gone or the write failed.
func (s *Selector) label(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, c upgrade.Candidate) (string, error) {
	attempt := string(ops.UID)
	sb := c.Sandbox
	if sb.Spec.UpgradePolicy != nil && s.pendingDirect != nil {
		// Its own direct upgrade may be under way with statusagg behind
		// (Select excludes one only once its status shows it).
		prev, err := s.pendingDirect(ctx, sb)
		if err != nil {
			return "", fmt.Errorf("admit sandbox %s/%s to ops %s: read the event stream for a direct upgrade of its own (spec.upgradePolicy): %w", sb.Namespace, sb.Name, ops.Name, err)
		}
		if prev != "" {
			klog.FromContext(ctx).Info("Wait: the sandbox's own direct upgrade was requested and statusagg has not recorded it yet (is statusagg running?); it is admitted once that upgrade ends",
				"sandbox", klog.KObj(sb), "directAttempt", prev)
			s.enqueueAfter(ops.Namespace+"/"+ops.Name, directPendingRecheck)
			return "", nil
		}
	}
	patch := metaPatch{Metadata: metaFields{
		ResourceVersion: sb.ResourceVersion,
		Labels: map[string]*string{
			agentsv1alpha1.LabelUpdateOps:     ptr(ops.Name),
			agentsv1alpha1.LabelUpgradeFailed: nil,
		},
	}}
	// The wake-up mark is written either way: one an earlier ops left (it
	// failed and was not deleted) must not wake the sandbox for this one.
	patch.Metadata.Annotations = map[string]*string{
		agentsv1alpha1.AnnotationUpgradeResumeTrigger: nil,
		upgrade.AnnotationClaim:                       ptr(upgrade.ClaimValue(ops.Name, attempt)),
	}
	if upgrade.WakeAtAdmission(sb) {
		patch.Metadata.Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger] = ptr("true")
	}
	failed, reason, resumes := upgrade.FailedAttempt(sb)
	if resumes && failed != attempt {
		// The chain failed itself continued goes on: its pod may be one an
		// attempt before it built (upgrade.ResumedChain), or one an attempt
		// that continued it built before it was abandoned (ChainBehind).
		patch.Metadata.Annotations[upgrade.AnnotationResumes] = ptr(upgrade.ResumesValue(attempt, failed, reason, upgrade.ChainBehind(sb, failed)...))
	}
	// The template from before a failed attempt's patch is kept for this
	// one when that attempt never backed the workspace up: its pods are
	// built from it until this attempt's preUpgrade succeeds. Any other
	// copy is stale; a fresh attempt's own is written by the patcher.
	_, keyed := sb.Annotations[upgrade.AnnotationOriginalTemplateFor]
	if _, kept := sb.Annotations[upgrade.AnnotationOriginalTemplate]; keyed || kept {
		if _, holds := upgrade.OriginalTemplate(sb); holds && resumes && failed != attempt {
			patch.Metadata.Annotations[upgrade.AnnotationOriginalTemplateFor] = ptr(attempt)
		} else if !holds {
			patch.Metadata.Annotations[upgrade.AnnotationOriginalTemplateFor] = nil
			patch.Metadata.Annotations[upgrade.AnnotationOriginalTemplate] = nil
		}
	}
	written, err := s.client.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		klog.FromContext(ctx).V(2).Info("Skip: sandbox is gone", "sandbox", klog.KObj(sb))
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("label sandbox %s/%s with ops %s: %w", sb.Namespace, sb.Name, ops.Name, err)
	}
	s.inflight.admitted(sb, attempt)
	return written.ResourceVersion, nil
}

// republish publishes `requested` again for admitted sandboxes whose status
// does not show the attempt yet, when this process has not published it
// (it restarted between label and publish) or did so longer than
// republishAfter ago. The message id is deterministic, so a copy inside the
// stream's duplicate window is dropped. While any such sandbox remains, the
// ops is checked again after republishAfter.
func (s *Selector) republish(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) error {
	attempt := string(ops.UID)
	waiting := false
	for _, c := range sel.Candidates {
		sb := c.Sandbox
		if !upgrade.ClaimedByOps(sb, ops.Name, ops.UID) {
			continue // not admitted, or admitted but not yet in the cache
		}
		if _, ok := upgrade.ReasonFor(sb, attempt); ok {
			s.inflight.forget(sb.UID, attempt) // statusagg has it: nothing left to recover
			continue
		}
		if c.State != upgrade.Updating {
			continue
		}
		waiting = true
		if again, err := s.requestAgain(ctx, ops, sb); err != nil {
			return err
		} else if again {
			klog.FromContext(ctx).Info("Republished requested: status does not show the attempt yet", "sandbox", klog.KObj(sb))
		}
	}
	if waiting {
		s.enqueueAfter(ops.Namespace+"/"+ops.Name, s.republishAfter)
	}
	return nil
}

// requestAgain publishes `requested` for sb, claimed by ops (the cache shows
// the claim), once more: when this process has not published it within
// republishAfter, and the stream does not show that its attempt went on
// (requestHandled; when the stream cannot tell, it is published, as a lost
// request must be). It reports whether it published.
func (s *Selector) requestAgain(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sb *agentsv1alpha1.Sandbox) (bool, error) {
	attempt := string(ops.UID)
	if last, ok := s.inflight.lastPublished(sb.UID, attempt); ok && time.Since(last) < s.republishAfter {
		return false, nil
	}
	if handled, err := requestHandled(ctx, s.publisher, sb, attempt); err == nil && handled {
		s.inflight.published(sb.UID, attempt, time.Now()) // looked at again after republishAfter
		return false, nil
	}
	return true, s.publishRequested(ctx, ops, sb, sb.ResourceVersion)
}

// requestHandled reports whether the stream shows that sb's attempt went on
// past `requested` and statusagg has not read how yet
// (events.Publisher.RequestHandled), so it must not be requested again. An
// error (NATS unreachable, a user without the read permission) is said in
// the log and returned: the caller decides which way is safe.
func requestHandled(ctx context.Context, pub *events.Publisher, sb *agentsv1alpha1.Sandbox, attempt string) (bool, error) {
	logger := klog.FromContext(ctx).WithValues("sandbox", klog.KObj(sb), "attempt", attempt)
	handled, err := pub.RequestHandled(ctx, sb.Namespace, sb.Name, sb.UID, attempt)
	if err != nil {
		logger.Info("Cannot tell from the stream whether the attempt went on past requested", "err", err)
		return false, err
	}
	if handled != "" {
		logger.V(2).Info("Not requested again: the stream holds a later event of the attempt that statusagg has not read yet", "event", handled)
		return true, nil
	}
	return false, nil
}

// publishRequested publishes `requested` for sb, claimed by ops at
// resourceVersion (or later).
func (s *Selector) publishRequested(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sb *agentsv1alpha1.Sandbox, resourceVersion string) error {
	ev := events.Event{
		Type: events.TypeRequested,
		Data: events.Data{
			Ops:     events.OpsRef{Name: ops.Name, UID: ops.UID},
			Sandbox: events.SandboxRef{Namespace: sb.Namespace, Name: sb.Name, UID: sb.UID},
			Attempt: string(ops.UID),

			SandboxResourceVersion: resourceVersion,
		},
	}
	// A sandbox left failed by an earlier attempt continues it; its status
	// still shows that attempt until statusagg sees this one. The patcher
	// decides where, from the table and the pod (upgrade.ResumeAt).
	if upgrade.CurrentAttempt(sb) != string(ops.UID) {
		if failed, reason, ok := upgrade.FailedAttempt(sb); ok {
			ev.Data.ResumedAttempt, ev.Data.ResumedReason = failed, reason
		}
	}
	if err := s.publisher.Publish(ctx, ev); err != nil {
		return fmt.Errorf("request upgrade of sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	s.inflight.published(sb.UID, string(ops.UID), time.Now())
	return nil
}

// syncFailedLabels keeps `upgrade-failed=true` on exactly the sandboxes
// claimed by ops whose attempt ended in a failed reason, writing only where
// the label differs.
func (s *Selector) syncFailedLabels(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sandboxes []*agentsv1alpha1.Sandbox) error {
	for _, sb := range sandboxes {
		if !upgrade.ClaimedByOps(sb, ops.Name, ops.UID) {
			continue // another ops's, or a claim an earlier ops of this name left: its label is not this ops's to change
		}
		failed := upgrade.StateFor(sb, ops.Name, ops.UID) == upgrade.Failed
		if failed == (sb.Labels[agentsv1alpha1.LabelUpgradeFailed] == "true") {
			continue
		}
		value := ptr("true")
		if !failed {
			value = nil
		}
		patch := metaPatch{Metadata: metaFields{Labels: map[string]*string{agentsv1alpha1.LabelUpgradeFailed: value}}}
		_, err := s.client.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if words := upgrade.Refusal(err); words != "" {
			// Refused for good (an admission policy on sandboxes): logged, and
			// not allowed to hold up the admission of every other sandbox.
			klog.FromContext(ctx).Error(err, "The API server refuses the upgrade-failed label; a next ops cannot select this sandbox by it", "sandbox", klog.KObj(sb), "failed", failed)
			continue
		}
		if err != nil {
			return fmt.Errorf("set label %s=%t on sandbox %s/%s: %w", agentsv1alpha1.LabelUpgradeFailed, failed, sb.Namespace, sb.Name, err)
		}
		klog.FromContext(ctx).Info("Marked upgrade failed label", "sandbox", klog.KObj(sb), "failed", failed)
	}
	return nil
}
