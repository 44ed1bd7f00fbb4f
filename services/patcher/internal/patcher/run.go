package patcher

import (
	"context"
	"fmt"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"

	"molt.dev/pkg/events"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	informers "molt.dev/pkg/generated/informers/externalversions"
	"molt.dev/pkg/service"
)

// Run starts patcher and blocks until ctx is cancelled.
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
		p := &Patcher{
			agents:      agents,
			kube:        rt.Kube,
			wakeTimeout: cfg.PodReadyTimeout,
			ops:         factory.Agents().V1alpha1().SandboxUpdateOps().Lister(),
		}
		synced := []func() bool{
			factory.Agents().V1alpha1().SandboxUpdateOps().Informer().HasSynced,
		}
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		rt.AddReadyCheck("informers", func() error {
			for _, s := range synced {
				if !s() {
					return fmt.Errorf("ops cache not synced yet")
				}
			}
			return nil
		})
		ep, err := events.Open(ctx, rt.JetStream, rt.Registry, events.ConsumerPatcher, rt.Options.Stream, events.ConsumerConfig{})
		if err != nil {
			return err
		}
		p.publisher = ep.Publisher
		factory.WaitForCacheSync(ctx.Done())
		handle := events.FailOnLastDelivery(ep.Publisher, patchFailure, p.Handle)
		return ep.Consume(ctx, handle, events.WithWorkers(cfg.Workers))
	})
}

// patchFailure files a `requested` that could not be handled under
// PreUpgrade, the stage the patch is written in.
func patchFailure(ev events.Event) (events.StageFailure, bool) {
	if ev.Type != events.TypeRequested {
		return events.StageFailure{}, false
	}
	return events.StageFailure{Stage: agentsv1alpha1.UpgradingReasonPreUpgrade, Reason: agentsv1alpha1.UpgradingReasonPreUpgradeFailed}, true
}
