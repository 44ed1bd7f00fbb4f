package patcher

import (
	"context"

	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/controller"
	"molt.dev/pkg/events"
	informers "molt.dev/pkg/generated/informers/externalversions"
	"molt.dev/pkg/service"
)

// Run starts patcher and blocks until ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return service.Run(ctx, cfg.Options, func(ctx context.Context, rt *service.Runtime) error {
		agents := rt.Agents
		factory := informers.NewSharedInformerFactoryWithOptions(agents, 0, informers.WithTransform(controller.StripManagedFields))
		p := &Patcher{
			agents:      agents,
			kube:        rt.Kube,
			wakeTimeout: cfg.PodReadyTimeout,
			ops:         factory.Agents().V1alpha1().SandboxUpdateOps().Lister(),
		}
		synced := []cache.InformerSynced{
			factory.Agents().V1alpha1().SandboxUpdateOps().Informer().HasSynced,
		}
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		rt.ReadyWhenSynced("ops cache", synced...)
		ep, err := rt.OpenEvents(ctx, events.ConsumerPatcher, events.ConsumerConfig{})
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
