package hookrunner

import (
	"context"
	"fmt"

	"molt.dev/pkg/agentruntime"
	"molt.dev/pkg/events"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	informers "molt.dev/pkg/generated/informers/externalversions"
	"molt.dev/pkg/service"
)

// Run starts hookrunner and blocks until ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return service.Run(ctx, cfg.Options, func(ctx context.Context, rt *service.Runtime) error {
		agents, err := versioned.NewForConfig(rt.RestConfig)
		if err != nil {
			return fmt.Errorf("build agents client: %w", err)
		}
		factory := informers.NewSharedInformerFactory(agents, 0)
		sandboxes := factory.Agents().V1alpha1().Sandboxes()
		h := &HookRunner{kube: rt.Kube, sandboxes: sandboxes.Lister(), exec: agentruntime.Exec, reachWait: cfg.ReachWait}
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		rt.AddReadyCheck("informers", func() error {
			if !sandboxes.Informer().HasSynced() {
				return fmt.Errorf("sandbox cache not synced yet")
			}
			return nil
		})
		ep, err := events.Open(ctx, rt.JetStream, rt.Registry, events.ConsumerHookRunner, events.StreamConfig{}, events.ConsumerConfig{})
		if err != nil {
			return err
		}
		h.publisher = ep.Publisher
		factory.WaitForCacheSync(ctx.Done())
		return ep.Consume(ctx, h.Handle, events.WithWorkers(cfg.MaxHooks))
	})
}
