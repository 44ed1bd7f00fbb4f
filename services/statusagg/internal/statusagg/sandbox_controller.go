package statusagg

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// inProgressStaleness bounds how long a sandbox's pod-only changes wait while
// one of its attempts is in a stage: the stage's next transition writes them
// anyway (every stage has a deadline), so an upgrade costs no status write
// per pod change. While a stage runs the phase stays Upgrading and Ready
// False whatever the pod does, so only podInfo, sandboxIp and nodeName wait,
// and they change only while the pod is being replaced. The MESSAGE, empty in
// a stage but for a new pod that cannot be scheduled, does not wait. Two minutes outlast
// the pod replacement of a large rollout on a busy API server (30 s did not:
// half the sandboxes of 1000 at maxUnavailable 100% paid a write for it) and
// still refresh them during a long hook.
const inProgressStaleness = 2 * time.Minute

// syncSandbox is the one writer of a sandbox's status (see writes.go):
//  1. load the sandbox from the cache (gone → release the waiting events
//     with "gone", forget its stage clock); one the cache does not show as
//     the waiting events saw it is read from the API server;
//  2. take the status we know (our last write until the cache shows it) with
//     the pending transitions, and recompute the rest (desiredSandboxStatus)
//     from the spec and the pod (named after the sandbox, owned by it);
//  3. nothing changed → record the waiters' transitions (recordWritten) and
//     release them; an attempt's success while the
//     pod cache does not show the pod Ready → look again when it does, up to
//     podCatchUp; pending transitions younger
//     than the coalescing window (--status-coalesce) and not an attempt's
//     end → look again when it ends; only pod or generation fields
//     changed while an attempt is in a stage, its status written in a stage
//     less than inProgressStaleness ago (remembered past the entry,
//     sandboxWrites.inStage) → look again then (the stage's next transition
//     usually carries them first);
//  4. write the whole status with one JSON patch (no GET, no
//     resourceVersion, so no conflict with spec or label writes), remember
//     what the server returned, record the waiters' transitions
//     (recordWritten) and release them. A failed
//     write releases them with the error (their events are retried) and
//     retries the key with backoff.
func (s *server) syncSandbox(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("split key %q: %w", key, err)
	}
	logger := klog.FromContext(ctx).WithValues("sandbox", klog.KRef(ns, name))
	e := s.writes.lock(key)
	defer e.mu.Unlock()
	defer s.writes.forget(key, e)

	sb, err := s.sandboxes.Sandboxes(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get sandbox %s: %w", key, err)
	}
	if (sb == nil || sb.UID != e.uid) && len(e.waiters) > 0 {
		// The events saw a sandbox the cache does not show yet.
		if sb, err = s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.resolve("", fmt.Errorf("get sandbox %s: %w", key, err))
			return fmt.Errorf("get sandbox %s: %w", key, err)
		}
	}
	if sb == nil || apierrors.IsNotFound(err) {
		e.resolve("sandbox is gone", nil)
		e.written = nil
		s.clock.forget(key)
		s.writes.wrote(key, "", false, time.Time{})
		return nil
	}
	e.adopt(sb.UID)
	if e.caughtUp(sb) {
		e.written = nil
	}
	known := e.status(&sb.Status)
	// Shallow copies, only read: desiredSandboxStatus deep-copies the status
	// it starts from, and the cache's objects are never changed.
	view := *sb
	view.Status = *known
	if e.pending != nil {
		view.Status.Conditions = e.pending
	}
	pod := s.podOf(sb)
	want := desiredSandboxStatus(&view, pod)
	if equality.Semantic.DeepEqual(*known, want) {
		written := *sb
		written.Status = *known
		s.recordWritten(key, &written, e.waiters)
		e.resolve("", nil)
		return nil
	}
	if wait := e.awaitPod(&want, time.Now()); wait > 0 {
		// The attempt succeeded on a pod the cache does not show Ready yet:
		// give the pod watch a moment, so one write carries both.
		s.sandboxCtl.EnqueueAfter(key, wait)
		return nil
	}
	if hold := e.holdFor(s.coalesce, s.startWindow, time.Now()); hold > 0 {
		// A change of the sandbox or its pod woke this sync before the
		// window of the pending transitions ended: they wait for the rest of
		// it, so the next stage can join them.
		s.sandboxCtl.EnqueueAfter(key, hold)
		return nil
	}
	if len(e.waiters) == 0 && upgrade.InProgress(upgradingReason(known)) && want.Message == known.Message && samePaused(known, &want) {
		// (A new MESSAGE does not wait: in a stage it is empty, but for a
		// new pod the scheduler cannot place, which the user must see now;
		// nor does the user's pause, which says it waits for the upgrade.)
		if wait := inProgressStaleness - time.Since(s.writes.lastStageWrite(key, sb.UID)); wait > 0 {
			s.sandboxCtl.EnqueueAfter(key, wait)
			return nil
		}
	}
	body, err := statusPatch(sb.UID, want, e.claim)
	if err != nil {
		e.resolve("", err)
		return fmt.Errorf("encode status of sandbox %s: %w", key, err)
	}
	written, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{}, "status")
	switch {
	case apierrors.IsNotFound(err):
		e.resolve("sandbox is gone", nil)
		e.written = nil
		return nil
	case err != nil:
		// A failed test lands here too: the sandbox was created again, or
		// its ops released it before the attempt's start was written. The
		// events are retried against the sandbox as it is now.
		e.resolve("", fmt.Errorf("write status of sandbox %s: %w", key, err))
		return fmt.Errorf("write status of sandbox %s: %w", key, err)
	}
	// Keep a copy of the status only: a pointer into the response would keep
	// the whole object (its spec and managedFields) alive while the entry waits
	// for the informer.
	st := written.Status
	e.written, e.writtenVersion = &st, written.ResourceVersion
	if refused := refusalNews(known, &want, agentsv1alpha1.ConditionReady, agentsv1alpha1.ReadyReasonPodCreateFailed); refused != "" {
		s.recorder.Event(written, corev1.EventTypeWarning, EventPodCreateFailed, refused)
	}
	if refused := refusalNews(known, &want, agentsv1alpha1.ConditionSandboxPaused, PausedReasonPodDeleteRefused); refused != "" {
		s.recorder.Event(written, corev1.EventTypeWarning, EventPodDeleteRefused, refused)
	}
	if agentsv1alpha1.IsUpgradingFailedReason(upgradingReason(&want)) && podRefusedAfterFailure(sb, pod) && want.Message != known.Message {
		// Ready stays Upgrading (API.md) while the attempt shows failed.
		s.recorder.Event(written, corev1.EventTypeWarning, EventPodCreateFailed, want.Message)
	}
	s.writes.wrote(key, sb.UID, upgrade.InProgress(upgradingReason(&want)), time.Now())
	events := len(e.waiters)
	s.recordWritten(key, written, e.waiters)
	e.resolve("", nil)
	logger.V(2).Info("Wrote sandbox status", "phase", want.Phase, "stage", upgradingReason(&want), "events", events, "podUID", want.PodInfo.PodUID)
	return nil
}

// upgradingReason is the reason of the Upgrading condition, or "".
func upgradingReason(st *agentsv1alpha1.SandboxStatus) string {
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionUpgrading); c != nil {
		return c.Reason
	}
	return ""
}

// podOf returns the sandbox's pod from the cache: the pod named after it
// and owned by it, or nil.
func (s *server) podOf(sb *agentsv1alpha1.Sandbox) *corev1.Pod {
	pod, err := s.pods.Pods(sb.Namespace).Get(sb.Name)
	if err != nil {
		return nil
	}
	for _, ref := range pod.OwnerReferences {
		if ref.UID == sb.UID {
			return pod
		}
	}
	return nil
}

// enqueuePodOwner maps a pod event to its owning sandbox's key.
func (s *server) enqueuePodOwner(obj any) {
	pod, ok := podFrom(obj)
	if !ok {
		return
	}
	for _, ref := range pod.OwnerReferences {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err == nil && gv.Group == agentsv1alpha1.GroupName && ref.Kind == "Sandbox" && ref.Name == pod.Name {
			key := pod.Namespace + "/" + ref.Name
			if s.writes.awaitsPod(key) {
				s.sandboxCtl.EnqueueKey(key)
				return
			}
			s.sandboxCtl.EnqueueAfter(key, min(s.coalesce, s.startWindow))
			return
		}
	}
}

// podHandler enqueues the owning sandbox on every pod add, update and delete,
// after the coalescing window, so a pod's burst of changes is one write.
func (s *server) podHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    s.enqueuePodOwner,
		UpdateFunc: func(_, obj any) { s.enqueuePodOwner(obj) },
		DeleteFunc: func(obj any) {
			s.newPodDeleted(obj)
			s.enqueuePodOwner(obj)
		},
	}
}

// newPodDeleted tells of a pod deleted that its sandbox's attempt built, while
// the status shows the attempt in UpgradePod, or still in PreUpgrade (EventNewPodDeleted): podcycler
// builds it again, and the stage would otherwise only take longer.
func (s *server) newPodDeleted(obj any) {
	pod, ok := podFrom(obj)
	if !ok {
		return
	}
	sb, err := s.sandboxes.Sandboxes(pod.Namespace).Get(pod.Name)
	if err != nil || sb.DeletionTimestamp != nil || !upgrade.ControlledBy(pod, sb.UID) {
		return
	}
	// The stage as this process has it (its writes are coalesced, and the
	// cache trails them); not known while one is being written. A new pod of
	// the attempt is past PreUpgrade whatever that shows.
	conds, known := s.writes.conditionsNow(pod.Namespace+"/"+pod.Name, sb)
	if !known {
		return
	}
	view := *sb
	view.Status.Conditions = conds
	attempt := upgrade.CurrentAttempt(&view)
	if reason, _ := upgrade.ReasonFor(&view, attempt); (reason != agentsv1alpha1.UpgradingReasonUpgradePod && reason != agentsv1alpha1.UpgradingReasonPreUpgrade) ||
		!upgrade.NewPodOf(pod, attempt) {
		return
	}
	if rev, err := upgrade.Revision(sb.Spec.Template); err != nil || pod.Labels[agentsv1alpha1.LabelPodTemplateHash] != rev {
		return // podcycler replaces a pod of an older template itself
	}
	again := "podcycler builds it again, and the upgrade goes on with that pod (if postUpgrade had begun on it, that stage fails instead, saying so)"
	if upgrade.ChecksPoint(sb, attempt) {
		again = "podcycler builds it again, restoring the attempt's checkpoint (with none to restore, or if postUpgrade had begun on it, the stage fails, saying so)"
	}
	s.recorder.Eventf(sb, corev1.EventTypeWarning, EventNewPodDeleted, "pod %s (uid %s), the new pod of upgrade attempt %s, was deleted before the upgrade went past UpgradePod (by hand, an eviction, or its node going away); %s", pod.Name, pod.UID, attempt, again)
}

// refusalNews is the message of a Warning Event when want's condition
// condType newly has reason, a refusal by the API server (or says so in
// other words), "" otherwise.
func refusalNews(was, want *agentsv1alpha1.SandboxStatus, condType, reason string) string {
	now := meta.FindStatusCondition(want.Conditions, condType)
	if now == nil || now.Reason != reason {
		return ""
	}
	if before := meta.FindStatusCondition(was.Conditions, condType); before != nil &&
		before.Reason == now.Reason && before.Message == now.Message {
		return ""
	}
	return now.Message
}

// podFrom is the pod an informer's handler was given (a deletion's last known
// state included).
func podFrom(obj any) (*corev1.Pod, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok
}

// samePaused reports whether a and b say the same of the sandbox's pause
// (SandboxPaused's status and reason).
func samePaused(a, b *agentsv1alpha1.SandboxStatus) bool {
	ca := meta.FindStatusCondition(a.Conditions, agentsv1alpha1.ConditionSandboxPaused)
	cb := meta.FindStatusCondition(b.Conditions, agentsv1alpha1.ConditionSandboxPaused)
	if ca == nil || cb == nil {
		return ca == cb
	}
	return ca.Status == cb.Status && ca.Reason == cb.Reason
}
