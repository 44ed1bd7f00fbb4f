package statusagg

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	corelisters "k8s.io/client-go/listers/core/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/controller"
	"molt.dev/pkg/events"
	"molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/generated/informers/externalversions"
	agentslisters "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/service"
)

// server is statusagg's shared state: clients, listers, the two controllers,
// metrics and the Event recorder.
type server struct {
	agents     versioned.Interface
	sandboxes  agentslisters.SandboxLister
	ops        agentslisters.SandboxUpdateOpsLister
	sets       agentslisters.SandboxSetLister
	pods       corelisters.PodLister
	sandboxCtl *controller.Controller
	opsCtl     *controller.Controller
	setCtl     *controller.Controller
	metrics    *metrics
	clock      *stageClock
	recorder   record.EventRecorder
	deleted    deletedNotes
	// writes, coalesce and startWindow: each sandbox's status writes
	// (writes.go), how long a write waits for more changes of its sandbox,
	// and how long at most when it starts an attempt or follows its pod.
	writes      sandboxWrites
	coalesce    time.Duration
	startWindow time.Duration
	// opsWrites and opsInterval pace an ops's status writes.
	opsWrites   opsWriteTimes
	opsInterval time.Duration
	// progressDeadline is how long a member on a set's current revision
	// may stay unavailable before the set's Progressing turns False.
	progressDeadline time.Duration
	// opsTails knows which ops had admitted every candidate at their last
	// recount: only there can a sandbox's success end the ops.
	opsTails opsTails
	// releases follows the selector's release of each ops being deleted.
	releases releaseWatch
	// stream follows this process's NATS connection for the ops
	// (EventStreamUnavailable).
	stream streamHealth
	// stalls is what the watchdog re-drove, by ops (StagesStalled).
	stalls stallBoard
	// working is when this process began to work as leader: a sandbox with
	// no phase yet may not have been seen before (upgrade.Starting).
	working time.Time
}

// Run starts statusagg and blocks until ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return service.Run(ctx, cfg.Options, func(ctx context.Context, rt *service.Runtime) error {
		return cfg.LeaderElection.Run(ctx, rt, func(ctx context.Context) error { return run(ctx, cfg, rt) })
	})
}

// run wires the informers, the two controllers and the event consumer, and
// runs them until ctx is cancelled or one of them fails.
func run(ctx context.Context, cfg Config, rt *service.Runtime) error {
	agents := rt.Agents
	m, err := newMetrics(rt.Registry)
	if err != nil {
		return err
	}
	// The stream and statusagg's consumer; Consume re-attaches if either is deleted.
	ep, err := rt.OpenEvents(ctx, events.ConsumerStatusAgg, events.ConsumerConfig{})
	if err != nil {
		return err
	}
	recorder, stopRecorder := newRecorder(ctx, apiServerEvents(rt.Kube), eventWriters)
	defer stopRecorder()

	agentInformers := externalversions.NewSharedInformerFactoryWithOptions(agents, 0, externalversions.WithTransform(controller.StripManagedFields))
	// Sandbox pods: podcycler creates every one with pod-template-hash (Deployments' pods,
	// which carry it too, are cached as stubs only: podStatusOnly).
	kubeInformers := informers.NewSharedInformerFactoryWithOptions(rt.Kube, 0,
		informers.WithTransform(podStatusOnly),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = agentsv1alpha1.LabelPodTemplateHash }))
	sandboxInf := agentInformers.Agents().V1alpha1().Sandboxes()
	opsInf := agentInformers.Agents().V1alpha1().SandboxUpdateOps()
	setInf := agentInformers.Agents().V1alpha1().SandboxSets()
	podInf := kubeInformers.Core().V1().Pods()

	s := &server{
		agents: agents, sandboxes: sandboxInf.Lister(), ops: opsInf.Lister(), sets: setInf.Lister(), pods: podInf.Lister(),
		metrics: m, clock: newStageClock(), recorder: recorder, coalesce: cfg.Coalesce, opsInterval: cfg.OpsInterval,
		startWindow:      cmp.Or(cfg.StartWindow, DefaultStartWindow),
		progressDeadline: cmp.Or(cfg.SetProgressDeadline, DefaultSetProgressDeadline),
		working:          time.Now(),
		stream:           streamHealth{cur: outage{server: service.RedactURL(cfg.NATSURL)}},
	}
	if cfg.LeaderElection.Enabled {
		s.releases.leaseNamespace = cfg.LeaderElection.Namespace
	}
	s.sandboxCtl = controller.New("statusagg-sandbox", s.syncSandbox, controller.WithMetrics(rt.Queues))
	s.opsCtl = controller.New("statusagg-ops", s.syncOps, controller.WithMetrics(rt.Queues))
	s.setCtl = controller.New("statusagg-sandboxset", s.syncSet, controller.WithMetrics(rt.Queues))
	for _, h := range []struct {
		inf     cache.SharedIndexInformer
		handler cache.ResourceEventHandler
	}{
		{sandboxInf.Informer(), s.sandboxCtl.Handler()},
		{sandboxInf.Informer(), s.namespaceHandler()},
		{sandboxInf.Informer(), s.deletedHandler()},
		{opsInf.Informer(), s.opsCtl.Handler()},
		{opsInf.Informer(), s.namespaceHandler()},
		{podInf.Informer(), s.podHandler()},
		{setInf.Informer(), s.setHandler()},
		{sandboxInf.Informer(), s.setHandler()},
	} {
		if _, err := h.inf.AddEventHandler(h.handler); err != nil {
			return fmt.Errorf("add informer handler: %w", err)
		}
	}
	synced := []cache.InformerSynced{sandboxInf.Informer().HasSynced, opsInf.Informer().HasSynced, podInf.Informer().HasSynced, setInf.Informer().HasSynced}

	agentInformers.Start(ctx.Done())
	kubeInformers.Start(ctx.Done())
	defer agentInformers.Shutdown()
	defer kubeInformers.Shutdown()
	rt.ReadyWhenSynced("sandbox, ops, pod and SandboxSet caches", synced...)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.sandboxCtl.Run(gctx, cfg.SandboxWorkers, synced...) })
	g.Go(func() error { return s.opsCtl.Run(gctx, cfg.OpsWorkers, synced...) })
	g.Go(func() error { return s.setCtl.Run(gctx, 2, synced...) })
	g.Go(func() error {
		if !cache.WaitForCacheSync(gctx.Done(), synced...) {
			return nil
		}
		return ep.Consume(gctx, s.handleEvent, events.WithWorkers(cfg.EventWorkers))
	})
	g.Go(func() error { return s.followStream(gctx, rt.NATS) })
	wd := &watchdog{s: s, cfg: cfg.Deadlines.orDefaults(), pub: ep.Publisher, now: time.Now, driven: map[string]drives{}, watching: time.Now(), queuedSeen: map[string]time.Time{}, lastWhere: map[string]string{},
		queues: newQueues(rt.JetStream, time.Now)}
	g.Go(func() error {
		if !cache.WaitForCacheSync(gctx.Done(), synced...) {
			return nil
		}
		return wd.run(gctx)
	})
	return g.Wait()
}

// podStatusOnly is the pod informer's transform: statusagg reads a pod's
// metadata, status and node name, never the rest of its spec (containers,
// volumes, tolerations), so only those are cached. At 10,000 sandboxes the
// rest was about a tenth of statusagg's heap. Nothing here writes a pod.
func podStatusOnly(obj any) (any, error) {
	obj, err := controller.SandboxPodsOnly(obj)
	if pod, ok := obj.(*corev1.Pod); ok && err == nil {
		pod.Spec = corev1.PodSpec{NodeName: pod.Spec.NodeName}
	}
	return obj, err
}
