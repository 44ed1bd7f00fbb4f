package podcycler

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/controller"
	"molt.dev/pkg/events"
	agentsinformers "molt.dev/pkg/generated/informers/externalversions"
	"molt.dev/pkg/service"
)

// Run starts podcycler and blocks until ctx is cancelled: the lifecycle loop over the
// Sandbox and Pod informers, and the prehook-done consumer.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return service.Run(ctx, cfg.Options, func(ctx context.Context, rt *service.Runtime) error {
		return run(ctx, cfg, rt)
	})
}

func run(ctx context.Context, cfg Config, rt *service.Runtime) error {
	agents := rt.Agents
	podMetrics, err := newMetrics(rt.Registry)
	if err != nil {
		return err
	}
	endpoint, err := rt.OpenEvents(ctx, events.ConsumerPodCycler, events.ConsumerConfig{})
	if err != nil {
		return err
	}

	agentFactory := agentsinformers.NewSharedInformerFactoryWithOptions(agents, 0, agentsinformers.WithTransform(controller.StripManagedFields))
	sandboxInformer := agentFactory.Agents().V1alpha1().Sandboxes()
	// Sandbox pods carry pod-template-hash (podcycler builds every one with it), and so do
	// Deployments' pods, which are cached as stubs only (controller.SandboxPodsOnly); the
	// handler keeps the pods a Sandbox controls.
	podFactory := informers.NewSharedInformerFactoryWithOptions(rt.Kube, 0, informers.WithTransform(controller.SandboxPodsOnly),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = agentsv1alpha1.LabelPodTemplateHash }))
	podInformer := podFactory.Core().V1().Pods()

	c := &cycler{
		kube:         rt.Kube,
		agents:       agents,
		sandboxes:    sandboxInformer.Lister(),
		pods:         podInformer.Lister(),
		publisher:    endpoint.Publisher,
		metrics:      podMetrics,
		inFlight:     newInFlight(),
		readyTimeout: cfg.PodReadyTimeout,
		handlerGrace: cfg.UpgradePodGrace,
		now:          time.Now,
	}
	c.ctl = controller.New("podcycler", c.sync, controller.WithMetrics(rt.Queues))
	if _, err := sandboxInformer.Informer().AddEventHandler(c.ctl.Handler()); err != nil {
		return fmt.Errorf("watch sandboxes: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(c.podHandler()); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(c.gone.handler()); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	synced := []cache.InformerSynced{sandboxInformer.Informer().HasSynced, podInformer.Informer().HasSynced}
	rt.ReadyWhenSynced("sandbox and pod caches", synced...)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	agentFactory.Start(ctx.Done())
	podFactory.Start(ctx.Done())
	defer agentFactory.Shutdown()
	defer podFactory.Shutdown()

	done := make(chan error, 2)
	go func() { done <- c.ctl.Run(ctx, cfg.Workers, synced...) }()
	go func() {
		// Handle prehook-done only once the caches can tell whether a pod's name is free.
		if !cache.WaitForCacheSync(ctx.Done(), synced...) {
			done <- nil
			return
		}
		handle := events.FailOnLastDelivery(endpoint.Publisher, upgradePodFailure, c.handlePreHookDone)
		done <- endpoint.Consume(ctx, handle, events.WithWorkers(cfg.Workers))
	}()
	first := <-done
	cancel()
	return errors.Join(first, <-done)
}
