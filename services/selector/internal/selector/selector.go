package selector

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/generated/clientset/versioned"
	listers "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// Selector admits the sandboxes of each SandboxUpdateOps into its upgrade.
// It reads from listers, writes only labels, annotations and finalizers
// (never status: statusagg owns it) and publishes `requested`.
type Selector struct {
	client        versioned.Interface
	kube          kubernetes.Interface
	opsLister     listers.SandboxUpdateOpsLister
	sandboxLister listers.SandboxLister
	// pods are the sandboxes' pods (podcycler's, by pod-template-hash);
	// nil in tests that need none.
	pods           corelisters.PodLister
	publisher      *events.Publisher
	republishAfter time.Duration
	enqueueAfter   func(key string, d time.Duration)
	// inflight remembers admissions the informer cache may not show yet,
	// and when `requested` was last published for each.
	inflight *inflight
	// waiting holds, by namespace, whether its active ops had not-started
	// sandboxes beyond its budget at its last sync; only there can the end
	// of an attempt let one start at once.
	waiting sync.Map
	// pausedPassed holds the UIDs of paused ops whose patch passed the check:
	// not recorded (a pass is recorded only at the first admission, checked
	// again then, as admission or quota may have changed while it was paused),
	// and not checked again on every sync while paused.
	pausedPassed sync.Map
	// starts remembers the ops this process admits for in each namespace.
	starts starts
	// pendingDirect returns a direct attempt of sb that its status does not
	// show yet (direct.pendingDirect): such a sandbox is not claimed.
	pendingDirect func(ctx context.Context, sb *agentsv1alpha1.Sandbox) (string, error)
}

// podOf is sb's pod when the pod cache has one its controller reference
// proves sb's, else nil.
func (s *Selector) podOf(sb *agentsv1alpha1.Sandbox) *corev1.Pod {
	if s.pods == nil {
		return nil
	}
	pod, err := s.pods.Pods(sb.Namespace).Get(sb.Name)
	if err != nil || !upgrade.ControlledBy(pod, sb.UID) {
		return nil
	}
	return pod
}

// waitsForBudget is false only when the namespace's last sync left nothing
// waiting for budget.
func (s *Selector) waitsForBudget(namespace string) bool {
	v, ok := s.waiting.Load(namespace)
	return !ok || v.(bool)
}

// namespaceHandler enqueues every ops of the namespace of whatever changed:
// a sandbox's status frees or uses budget, and one ops ending lets the next
// one of its namespace start.
func (s *Selector) namespaceHandler(enqueue func(key string)) cache.ResourceEventHandler {
	onChange := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		meta, ok := obj.(interface{ GetNamespace() string })
		if !ok {
			return
		}
		list, err := s.opsLister.SandboxUpdateOps(meta.GetNamespace()).List(labels.Everything())
		if err != nil {
			utilruntime.HandleError(fmt.Errorf("list ops of namespace %s: %w", meta.GetNamespace(), err))
			return
		}
		for _, ops := range list {
			enqueue(ops.Namespace + "/" + ops.Name)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    onChange,
		UpdateFunc: func(_, obj any) { onChange(obj) },
		DeleteFunc: onChange,
	}
}

// recountAfter is how long a sandbox change that may change its ops's counts
// waits before the ops is reconciled where no sandbox waits for budget: the
// changes of a burst are reconciled once, since each reconcile reads every
// sandbox of the namespace. quietRecountAfter is the same for a change that
// cannot let a sandbox start (a stage moving on, a pod or spec change, the
// claim or the attempt's start): nothing waits on it, so it only has to be
// looked at eventually (a crash between label and publish is found by the
// republish check of that reconcile).
const (
	recountAfter      = 100 * time.Millisecond
	quietRecountAfter = time.Second
)

// sandboxHandler enqueues the ops of a changed sandbox's namespace: at once
// when the change can let another sandbox start (it was added or deleted,
// its attempt ended, its claim was released or its labels changed:
// upgrade.CountsMayChange but not upgrade.TakesBudgetOnly) and sandboxes
// wait for budget; after recountAfter when it may change the counts but
// nothing waits; otherwise (no count changes, or only budget taken: the
// claim appearing, the attempt starting) after quietRecountAfter. At
// maxUnavailable 10% of 1000, the claim and the start were two of every
// sandbox's three immediate recounts of the whole namespace.
func (s *Selector) sandboxHandler(now func(key string), later func(key string, d time.Duration)) cache.ResourceEventHandler {
	immediate := s.namespaceHandler(now)
	delayed := s.namespaceHandler(func(key string) { later(key, recountAfter) })
	quiet := s.namespaceHandler(func(key string) { later(key, quietRecountAfter) })
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { immediate.OnAdd(obj, false) },
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*agentsv1alpha1.Sandbox)
			cur, ok2 := newObj.(*agentsv1alpha1.Sandbox)
			switch {
			case !ok1 || !ok2:
				immediate.OnUpdate(oldObj, newObj)
			case !upgrade.CountsMayChange(old, cur), upgrade.TakesBudgetOnly(old, cur):
				quiet.OnUpdate(oldObj, newObj)
			case !s.waitsForBudget(cur.Namespace):
				delayed.OnUpdate(oldObj, newObj)
			default:
				immediate.OnUpdate(oldObj, newObj)
			}
		},
		DeleteFunc: immediate.OnDelete,
	}
}

// sync reconciles one ops, step by step:
//  1. load the ops; gone → nothing to do;
//  2. being deleted → release its sandboxes, then its finalizer;
//  3. ensure the finalizer;
//  4. keep `upgrade-failed` in step with the attempt's state on the
//     sandboxes it claimed (also once the ops is finished), and put the ops
//     label back on one that lost it while its attempt is in a stage
//     (relabel);
//  5. finished, or not the namespace's active ops → stop here;
//  6. select and count, counting admissions the cache does not show yet;
//  7. republish `requested` for admitted sandboxes whose status does not
//     show the attempt (a crash between label and publish);
//  8. paused → admit nothing new;
//  9. before the first admission, check that the patch can work at all
//     (checkPatch); one that cannot is recorded on the ops and nothing is
//     admitted (statusagg fails the ops with InvalidPatch);
//
// 10. admit up to maxUnavailable − (updating + failed): label, then publish.
func (s *Selector) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("split key %q: %w", key, err)
	}
	logger := klog.FromContext(ctx).WithValues("ops", klog.KRef(namespace, name))
	ctx = klog.NewContext(ctx, logger)

	ops, err := s.opsLister.SandboxUpdateOps(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		logger.V(4).Info("Skip: ops is gone")
		return nil
	}
	if err != nil {
		return fmt.Errorf("get ops %s: %w", key, err)
	}
	logger = logger.WithValues("attempt", string(ops.UID))
	ctx = klog.NewContext(ctx, logger)

	if ops.DeletionTimestamp != nil {
		return s.release(ctx, ops)
	}
	if err := s.ensureFinalizer(ctx, ops); err != nil {
		return err
	}
	sandboxes, err := s.sandboxLister.Sandboxes(namespace).List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list sandboxes of %s: %w", namespace, err)
	}
	if err := s.syncFailedLabels(ctx, ops, sandboxes); err != nil {
		return err
	}
	if err := s.relabel(ctx, ops, sandboxes); err != nil {
		return err
	}
	if upgrade.IsFinished(ops) {
		s.inflight.forgetAttempt(string(ops.UID))
		logger.V(4).Info("Skip: ops is finished", "phase", ops.Status.Phase)
		return nil
	}
	all, err := s.opsLister.SandboxUpdateOps(namespace).List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list ops of %s: %w", namespace, err)
	}
	if active := upgrade.ActiveOps(all); active == nil || active.UID != ops.UID {
		logger.V(4).Info("Skip: another ops is active in the namespace", "active", activeName(active))
		return nil
	}

	sel, err := upgrade.Select(ops, sandboxes, upgrade.OtherActive(all, ops.Name))
	if err != nil {
		// Bad input: statusagg reports it on the ops; nothing is touched.
		logger.Info("Skip: ops cannot select sandboxes", "err", err)
		return nil
	}
	sel = countInflight(sel, func(c upgrade.Candidate) bool {
		return s.inflight.unseen(c.Sandbox, string(ops.UID))
	})
	if err := s.republish(ctx, ops, sel); err != nil {
		return err
	}
	if ops.Spec.Paused {
		// The patch is checked all the same (once): an ops created paused, to
		// look before it starts, says at once that its patch cannot work.
		if _, checked := upgrade.PatchVerdict(ops); !checked && sel.NotStarted > 0 {
			if _, passed := s.pausedPassed.Load(ops.UID); !passed {
				problem, err := s.decidePatch(ctx, ops, notStarted(sel))
				if err != nil {
					return err
				}
				if problem == "" {
					s.pausedPassed.Store(ops.UID, true)
				} else if err := s.recordPatchCheck(ctx, ops, problem); err != nil {
					return err
				}
			}
		}
		logger.V(4).Info("Skip admission: ops is paused")
		return nil
	}
	s.pausedPassed.Delete(ops.UID) // resumed: checked (and recorded) at its first admission
	sel.PodOf = s.podOf            // the pauses below look at a resumed sandbox's pod
	if paused, err := s.pauseForMisspelling(ctx, ops, sel); err != nil || paused {
		return err
	}
	if paused, err := s.pauseForNoBackup(ctx, ops, sel); err != nil || paused {
		return err
	}
	if paused, err := s.pauseForCheckpointKept(ctx, ops, sel); err != nil || paused {
		return err
	}
	if paused, err := s.pauseForBackupOffVolume(ctx, ops, sel); err != nil || paused {
		return err
	}
	toAdmit := sel.ToAdmit()
	s.waiting.Store(namespace, sel.NotStarted-sel.Refused > len(toAdmit)) // refused claims never start
	if len(toAdmit) == 0 {
		return nil
	}
	if other := s.starts.take(ops, all); other != "" {
		// Started here a moment ago, and the cache does not show it yet.
		logger.Info("Skip: another ops of the namespace was started by this process first", "active", other)
		return nil
	}
	if problem, err := s.checkPatch(ctx, ops, notStarted(sel)); err != nil || problem != "" {
		return err
	}
	return s.admit(ctx, ops, toAdmit)
}

func activeName(o *agentsv1alpha1.SandboxUpdateOps) string {
	if o == nil {
		return ""
	}
	return o.Name
}

// notStarted returns the sandboxes of sel not started yet, in the order they start.
func notStarted(sel upgrade.Selection) []*agentsv1alpha1.Sandbox {
	var out []*agentsv1alpha1.Sandbox
	for _, c := range sel.Candidates {
		if c.State == upgrade.NotStarted {
			out = append(out, c.Sandbox)
		}
	}
	return out
}
