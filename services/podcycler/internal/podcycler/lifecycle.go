package podcycler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/controller"
	"molt.dev/pkg/events"
	agentsclient "molt.dev/pkg/generated/clientset/versioned"
	agentslisters "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// cycler is podcycler's state: the lifecycle loop (sync) and the prehook-done handler
// (handlePreHookDone) share it.
type cycler struct {
	// gone wakes waitNameFree when an old pod's delete reaches the cache.
	gone podGone
	// created holds back a second create of a pod this process just created while
	// the pod cache does not show it yet (see createMissingPod).
	created createdPods
	// builders remembers which attempt built each sandbox's last pod seen, also
	// after it is deleted (see unshownDirectPodGone).
	builders  podBuilders
	kube      kubernetes.Interface
	agents    agentsclient.Interface
	sandboxes agentslisters.SandboxLister
	pods      corelisters.PodLister
	publisher *events.Publisher
	ctl       *controller.Controller
	metrics   *metrics
	inFlight  *inFlight
	// reported remembers, per sandbox, the last outcome published for a pod
	// ("<pod uid>/<event type>") so informer updates do not publish it again.
	reported sync.Map
	// redrives remembers, per sandbox, the watchdog's last re-drive seen on
	// prehook-done (a redrive: its attempt and number), so the outcome published
	// again carries it (a new message id); only that attempt's outcomes do.
	redrives sync.Map

	readyTimeout time.Duration
	// handlerGrace is how long a pod missing under UpgradePod is left to the stage's
	// handler (see createMissingPod).
	handlerGrace time.Duration
	now          func() time.Time
}

// upgradeStagesOwningPod are the Upgrading reasons during which a missing pod must not be
// recreated by the lifecycle loop: the hooks run against a specific pod (a preUpgrade
// hook must never reach a new one), and their stage fails by itself when the pod is gone.
//
// ResumeSucceed is one: the woken pod was reported Ready, and the patcher goes
// on with it (or with no pod, failing the stage when preUpgrade needs one). A
// status that lags (statusagg coalesces fast stages, or fails over) still shows
// it while UpgradePod replaces the woken pod; a pod built here in that gap would
// be replaced too, a second pod of the attempt (rule 2).
var upgradeStagesOwningPod = map[string]bool{
	agentsv1alpha1.UpgradingReasonResumeSucceed: true,
	agentsv1alpha1.UpgradingReasonPreUpgrade:    true,
	agentsv1alpha1.UpgradingReasonCheckpointing: true,
	agentsv1alpha1.UpgradingReasonPostUpgrade:   true,
}

// sync brings one sandbox's pod in line with the sandbox, in this order:
//
//  1. load the sandbox; gone or being deleted → nothing (the garbage collector removes
//     the pod through its owner reference);
//  2. no spec.template (a templateRef) → nothing: pods are built from inline templates;
//     a CheckpointRestore attempt that Succeeded → delete its checkpoints (cleanCheckpoints;
//     a failed attempt's are kept, they may hold the only copy of the workspace);
//  3. spec.paused → delete the pod, with a UID precondition, unless an upgrade attempt
//     on it has not ended (upgrade.KeepAwake: an ops woke the sandbox for it, or its
//     user paused it mid-stage): then it is treated as running, and paused when the
//     attempt ends;
//  4. no pod → create it from spec.template, unless an upgrade owns the pod now
//     (createMissingPod);
//  5. a pod created by an upgrade attempt → watch it until Ready, failed or past its
//     deadline (watchUpgradedPod).
func (c *cycler) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key this controller produces; nothing to retry
	}
	logger := klog.FromContext(ctx).WithValues("sandbox", klog.KRef(namespace, name))
	ctx = klog.NewContext(ctx, logger)

	sb, err := c.sandboxes.Sandboxes(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.reported.Delete(key)
		c.redrives.Delete(key)
		c.gone.forget(key)
		c.created.forget(key)
		c.builders.forget(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get sandbox %s: %w", key, err)
	}
	if sb.DeletionTimestamp != nil {
		return nil
	}
	if sb.Spec.Template == nil {
		logger.V(4).Info("Skip: sandbox has no inline template")
		return nil
	}

	// A failure to clean up is retried (the error requeues the sandbox) but
	// does not hold back the pod's own work: a pause, a missing pod, a report.
	cleanErr := c.cleanCheckpoints(ctx, sb)
	return errors.Join(c.syncPod(ctx, key, sb), cleanErr)
}

// syncPod is sync's steps 3 to 5, for the sandbox sb (key) that has a template.
func (c *cycler) syncPod(ctx context.Context, key string, sb *agentsv1alpha1.Sandbox) error {
	logger := klog.FromContext(ctx)
	namespace, name := sb.Namespace, sb.Name
	pod, err := c.pods.Pods(namespace).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get pod %s: %w", key, err)
	}
	if apierrors.IsNotFound(err) {
		pod = nil
	}
	if _, refused := sb.Annotations[upgrade.AnnotationPodCreateError]; refused && pod != nil && ownedBy(pod, sb.UID) {
		// Its pod exists, however it was made (the UpgradePod handler, or
		// a create whose record was not removed): the refusal is past, and
		// must not show the next time the sandbox has no pod.
		if err := c.recordAnnotation(ctx, sb, upgrade.AnnotationPodCreateError, ""); err != nil {
			return err
		}
	}

	// A pod an admitted attempt not recorded yet may have built (a resume from
	// UpgradePod or later builds it at once) is left to that attempt: stopped
	// now, it would be built again once the attempt is recorded.
	pausing := sb.Spec.Paused && !upgrade.KeepAwake(sb) && admittedNotShown(sb) == ""
	if _, refused := sb.Annotations[upgrade.AnnotationPodDeleteError]; refused &&
		(!pausing || pod == nil || pod.DeletionTimestamp != nil || !ownedBy(pod, sb.UID)) {
		// Unpaused, or the pod is going: the refusal is past.
		if err := c.recordAnnotation(ctx, sb, upgrade.AnnotationPodDeleteError, ""); err != nil {
			return err
		}
	}

	switch {
	case pausing:
		if pod == nil || pod.DeletionTimestamp != nil || !ownedBy(pod, sb.UID) {
			return nil
		}
		if err := c.deletePod(ctx, namespace, name, pod.UID, reasonPause); err != nil {
			if words := upgrade.Refusal(err); words != "" {
				// Retried all the same (the error requeues the sandbox), and
				// recorded so that the sandbox says why it is not paused.
				return errors.Join(err, c.recordAnnotation(ctx, sb, upgrade.AnnotationPodDeleteError, words))
			}
			return err
		}
		logger.Info("Deleted pod of paused sandbox", "pod", klog.KObj(pod), "uid", pod.UID)
		return nil
	case pod == nil:
		return c.createMissingPod(ctx, key, sb)
	default:
		return c.watchUpgradedPod(ctx, key, sb, pod)
	}
}

// createMissingPod creates the pod of a sandbox that has none:
//   - an upgrade in this process is replacing the pod → nothing, the handler creates it;
//   - an ops admitted it for an attempt the status does not show yet, and it is not a
//     paused sandbox woken for it → nothing for now (admittedNotShown): that attempt's
//     stages own the pod, as below once it is recorded;
//   - the attempt in status is in ResumeSucceed, PreUpgrade, Checkpointing or PostUpgrade,
//     or in Resuming once the patcher patched it (the status lags) → nothing, that stage
//     owns the pod and fails by itself without it;
//   - the pod that went was built by a direct attempt the status does not show yet
//     (deleted a moment after its handler built it) → as for an attempt in UpgradePod,
//     below, with that attempt (unshownDirectPodGone);
//   - the attempt is in UpgradePod → nothing while the stage is young (handlerGrace after
//     the later of the stage's start and the old pod's delete seen here): the handler,
//     in this replica or another, creates the pod a moment after the old one is gone,
//     and creating it here too would only be refused (409). After that the handler is
//     taken for dead, and the pod is the one that stage builds (target revision, the
//     attempt's annotations), so a handler redelivered later finds it and adopts it
//     instead of creating a second one;
//   - spec.template carries the patch of an attempt that has not had a preUpgrade
//     succeed (upgrade.OriginalTemplate: a paused sandbox woken to resume an attempt
//     that failed in PreUpgrade, such a sandbox unpaused by hand, or its pod deleted)
//     → a plain pod from the template the sandbox had before that patch: a pod of the
//     patched template would start on the volumes before their backup;
//   - the attempt ended failed → a pod carrying that attempt (it is a new pod with an
//     empty workspace: a new attempt that resumes this one never backs it up over the
//     good backup, upgrade.ResumeAt);
//   - otherwise → a plain pod from spec.template.
//
// Under CheckpointRestore, the pod of the attempt (in UpgradePod, or failed) restores
// the checkpoint the stage's handler would use (restoreWithoutPod): a pod without it
// would be taken for restored, with an empty workspace. In UpgradePod with no checkpoint
// to restore, no pod is created: the handler, redelivered or re-driven by the watchdog,
// fails the stage saying so. A failed attempt with none gets its pod all the same, as
// without CheckpointRestore.
//
// A sandbox whose pod this process created a moment ago, and which the pod cache does
// not show yet, waits for the cache (createdPods) instead of sending the create again.
//
// Before it creates a pod it gives a sandbox without a runtime-access-token annotation a
// random one (ensureAccessToken): the agent-runtime refuses every call without it.
func (c *cycler) createMissingPod(ctx context.Context, key string, sb *agentsv1alpha1.Sandbox) error {
	logger := klog.FromContext(ctx)
	if c.inFlight.has(key) {
		logger.V(4).Info("Skip: the upgrade handler is replacing the pod")
		return nil
	}
	attempt := upgrade.CurrentAttempt(sb)
	reason, _ := upgrade.ReasonFor(sb, attempt)
	if upgradeStagesOwningPod[reason] {
		logger.V(2).Info("Skip: pod missing during an upgrade stage that owns it", "stage", reason, "attempt", attempt)
		return nil
	}
	if reason == agentsv1alpha1.UpgradingReasonResuming && upgrade.PatchedFor(sb, attempt) {
		// The status lags: the patcher patched the woken sandbox, so the
		// woken pod was Ready, and the attempt's stages own the pod as in
		// ResumeSucceed above (a resume's patch as a fresh attempt's: its
		// pinned hooks name it).
		logger.V(2).Info("Skip: pod missing while the status shows Resuming of an attempt the patcher has patched", "attempt", attempt)
		return nil
	}
	// A sandbox admitted to be woken gets its pod here, from its template
	// as it is, until the patcher has patched it (it keeps the template it
	// replaced for the attempt then): after that the attempt's stages own
	// the pod as for any other.
	// (A resume's mark is re-keyed to it by the selector at admission.)
	if admitted := admittedNotShown(sb); admitted != "" && (!upgrade.AdmittedToWake(sb) || upgrade.PatchedFor(sb, admitted)) {
		// An ops admitted the sandbox and statusagg has not recorded the
		// attempt yet: its stages own the pod as they will once recorded.
		// A pod missing now is one its UpgradePod handler (in this replica
		// or another) has just deleted and builds again, or one it builds
		// first; one made here would be replaced at once.
		logger.V(2).Info("Skip for now: pod missing while an admitted attempt is not recorded yet", "attempt", admitted)
		c.ctl.EnqueueAfter(key, c.handlerGrace)
		return nil
	}
	if unshown := c.unshownDirectPodGone(key, sb); unshown != "" {
		// Its handler built that pod, and it was deleted (by hand, a
		// moment after) before the status showed the attempt: a plain pod
		// now would never be reported on (it is not the attempt's), and
		// the stage would wait for the watchdog. The attempt's pod is
		// built instead, as once the status shows it in UpgradePod.
		logger.V(2).Info("The pod a direct attempt built is gone before the status shows the attempt; its pod is built again", "attempt", unshown)
		attempt, reason = unshown, agentsv1alpha1.UpgradingReasonUpgradePod
	}
	if reason == agentsv1alpha1.UpgradingReasonUpgradePod {
		if wait := c.leaveToHandler(key, sb); wait > 0 {
			logger.V(4).Info("Skip for now: the UpgradePod handler creates the pod", "recheckIn", wait)
			c.ctl.EnqueueAfter(key, wait)
			return nil
		}
		if opsName := sb.Labels[agentsv1alpha1.LabelUpdateOps]; opsName != "" && !strings.HasPrefix(attempt, upgrade.DirectAttemptPrefix) {
			// The attempt's pod is built from spec.template: not from an
			// edit that undid the ops's patch, which would be reported
			// ready and counted as updated. The handler, redelivered or
			// re-driven by the watchdog, fails the stage saying so.
			if _, undone, err := c.opsPatchUndone(ctx, sb, opsName, types.UID(attempt)); err != nil {
				return err
			} else if undone != "" {
				logger.Info("Skip: spec.template was edited since the ops patched it and no longer carries the patch; the UpgradePod handler fails the stage", "ops", opsName, "attempt", attempt, "undone", undone)
				return nil
			}
		}
	}
	if wait := c.created.pending(key, sb.UID, c.now()); wait > 0 {
		logger.V(4).Info("Skip for now: the pod cache does not show the pod created here yet", "recheckIn", wait)
		c.ctl.EnqueueAfter(key, wait)
		return nil
	}
	wrote, err := ensureAccessToken(ctx, c.agents, sb)
	if err != nil {
		return err
	}
	if wrote {
		logger.V(2).Info("Wrote access token of the agent-runtime")
	}
	tpl, original := upgrade.PodTemplate(sb)
	revision, err := upgrade.Revision(tpl)
	if err != nil {
		return fmt.Errorf("hash template of sandbox %s: %w", key, err)
	}
	pod, why := buildPodFrom(sb, tpl, revision, "", ""), reasonLifecycle
	switch {
	case original:
		// spec.template carries a patch whose preUpgrade has not backed
		// the workspace up: the pod runs the template it ran before, a
		// plain pod that a resume takes for the original and backs up.
	case reason == agentsv1alpha1.UpgradingReasonUpgradePod:
		pod, why = buildPod(sb, revision, attempt, sb.Labels[agentsv1alpha1.LabelUpdateOps]), reasonUpgrade
	case agentsv1alpha1.IsUpgradingFailedReason(reason) &&
		(upgrade.MayHaveReplacedPod(sb, attempt, reason) || upgrade.CheckpointFailedAfterBackup(sb, attempt, reason)):
		// The attempt (or its chain) may have replaced the pod, or took its
		// backup before its checkpoint failed: a pod built now is a new one
		// of the attempt (upgrade.ResumeAt never backs it up over the
		// backup or checkpoint taken). Otherwise it is a plain pod, which a
		// resume backs up first.
		pod = buildPod(sb, revision, attempt, sb.Labels[agentsv1alpha1.LabelUpdateOps])
	}
	if upgrade.BuiltBy(pod, attempt) && upgrade.ChecksPoint(sb, attempt) {
		id, err := c.restoreWithoutPod(ctx, sb, attempt)
		if err != nil {
			return err
		}
		switch {
		case id != "":
			pod.Annotations[upgrade.AnnotationRestoreFrom] = id
		case why == reasonUpgrade:
			logger.Info("Skip: no checkpoint to restore the pod of this CheckpointRestore attempt from; left to the UpgradePod handler, which fails the stage", "attempt", attempt)
			return nil
		}
	}
	// Expected before it is sent: the informer may report the pod before Create returns.
	// A create refused as AlreadyExists keeps the entry, as the pod exists.
	c.created.expect(key, sb.UID, c.now())
	created, err := c.createPod(ctx, pod, why)
	if err != nil {
		c.created.forget(key)
	}
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		logger.V(2).Info("Skip: namespace is being deleted, and the sandbox with it")
		return nil
	}
	if err != nil {
		if upgrade.PodCreateRefused(err) {
			if werr := c.recordAnnotation(ctx, sb, upgrade.AnnotationPodCreateError, upgrade.PodCreateErrorValue(err)); werr != nil {
				logger.Error(werr, "Could not record the refusal of the pod on the sandbox")
			}
		}
		return err
	}
	if created != nil {
		logger.Info("Created pod", "pod", klog.KObj(created), "uid", created.UID, "revision", revision, "reason", why, "originalTemplate", original)
	}
	if _, refused := sb.Annotations[upgrade.AnnotationPodCreateError]; refused {
		return c.recordAnnotation(ctx, sb, upgrade.AnnotationPodCreateError, "")
	}
	return nil
}

// recordAnnotation sets sb's annotation key to value, or removes it when
// value is "", unless the sandbox already says so: podcycler's records of
// the API server's refusals of the sandbox's pod (upgrade.AnnotationPodCreateError,
// removed once the pod is created; upgrade.AnnotationPodDeleteError), which
// statusagg shows, as nothing else tells the user why a sandbox stays
// Pending or does not pause.
func (c *cycler) recordAnnotation(ctx context.Context, sb *agentsv1alpha1.Sandbox, key, value string) error {
	if have, ok := sb.Annotations[key]; have == value && ok == (value != "") {
		return nil
	}
	patch := upgrade.AnnotationPatch(key, value)
	_, err := c.agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("write the %s annotation of sandbox %s/%s: %w", key, sb.Namespace, sb.Name, err)
	}
	return nil
}

// restoreWithoutPod returns the id of the checkpoint that the pod of sb's
// CheckpointRestore attempt restores when the sandbox has no pod: the attempt's own
// Succeeded checkpoint, else, if it continues a failed attempt, the newest Succeeded
// checkpoint of the sandbox (planRestore with no pod; "" when there is none).
func (c *cycler) restoreWithoutPod(ctx context.Context, sb *agentsv1alpha1.Sandbox, attempt string) (string, error) {
	all, err := c.listCheckpoints(ctx, sb)
	if err != nil {
		return "", err
	}
	own := takenBy(all, sb, attempt)
	plan, err := planRestore(sb, nil, attempt, resumedAttempt(sb, attempt, ""), own, func() ([]agentsv1alpha1.Checkpoint, error) { return all, nil })
	if err != nil || plan.from == nil {
		return "", err
	}
	if err := c.markDirectCheckpointRestore(ctx, sb, attempt); err != nil {
		return "", err
	}
	return plan.from.Status.CheckpointID, nil
}

// leaveToHandler returns how much longer a pod missing under UpgradePod is left to the
// stage's handler: handlerGrace after the later of the stage's start (the Upgrading
// condition's lastTransitionTime) and this process first knowing the old pod gone
// (podGone.missingSince), which can be long after the start when the pod takes its grace
// period to stop. Counting from the first time this process finds the pod missing, not
// only from the delete its informer reports, matters with replicas: the sync can see the
// pod missing before that report, and then the stage's start, often long past, would let
// it race the handler's create (a 409 for one of them).
func (c *cycler) leaveToHandler(key string, sb *agentsv1alpha1.Sandbox) time.Duration {
	since := c.gone.missingSince(key, c.now())
	if up := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading); up != nil && up.LastTransitionTime.After(since) {
		since = up.LastTransitionTime.Time
	}
	return since.Add(c.handlerGrace).Sub(c.now())
}

// enqueueOwner is the Pod informer's handler: it enqueues the sandbox that controls the
// pod (deletes included, through tombstones).
func (c *cycler) enqueueOwner(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if key, ok := ownerSandbox(pod); ok {
		c.builders.saw(key, pod)
		c.created.forget(key)
		c.ctl.EnqueueKey(key)
	}
}

// podHandler returns the Pod informer's event handlers.
func (c *cycler) podHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueOwner,
		UpdateFunc: func(_, obj any) { c.enqueueOwner(obj) },
		DeleteFunc: c.enqueueOwner,
	}
}

// unshownDirectPodGone returns the direct attempt that built sb's last pod
// seen, now missing (podBuilders), when sb's status does not show that attempt
// yet and the pod can only be that attempt's new pod; "" otherwise:
//   - the pod was sb's (not a pod of an earlier sandbox of that name);
//   - sb is claimed by no ops and the attempt is not superseded (upgrade.ClaimedBy);
//   - no other attempt is in a stage, and none was recorded after the pod was built
//     (the status is newer than the pod: the pod is an older attempt's);
//   - the attempt does not checkpoint: a pod of a CheckpointRestore attempt must
//     restore the checkpoint its handler takes, onto the image the checkpoint was
//     taken from, which only that handler checks (the stage waits for it, or for the
//     watchdog, as before).
func (c *cycler) unshownDirectPodGone(key string, sb *agentsv1alpha1.Sandbox) string {
	b, ok := c.builders.of(key)
	if !ok || b.sandbox != sb.UID || !strings.HasPrefix(b.attempt, upgrade.DirectAttemptPrefix) || b.ops != "" || sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" {
		return ""
	}
	if _, shown := upgrade.ReasonFor(sb, b.attempt); shown || !upgrade.ClaimedBy(sb, "", b.attempt) || upgrade.ChecksPoint(sb, b.attempt) {
		return ""
	}
	if cur := upgrade.CurrentAttempt(sb); cur != "" {
		if reason, _ := upgrade.ReasonFor(sb, cur); upgrade.InProgress(reason) {
			return ""
		}
	}
	for _, t := range []string{agentsv1alpha1.ConditionUpgrading, upgrade.ConditionAttempt} {
		if c := meta.FindStatusCondition(sb.Status.Conditions, t); c != nil && b.created.Before(c.LastTransitionTime.Time) {
			return ""
		}
	}
	return b.attempt
}

// admittedNotShown returns the attempt an ops admitted sb for (its claim
// annotation, with the ops label it names) while sb's status does not show
// that attempt yet, "" otherwise.
func admittedNotShown(sb *agentsv1alpha1.Sandbox) string {
	ops, attempt := upgrade.ClaimOf(sb)
	if ops == "" || attempt == "" || sb.Labels[agentsv1alpha1.LabelUpdateOps] != ops {
		return ""
	}
	if _, shown := upgrade.ReasonFor(sb, attempt); shown {
		return ""
	}
	return attempt
}
