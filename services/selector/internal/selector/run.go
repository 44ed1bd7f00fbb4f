package selector

import (
	"context"
	"fmt"

	"molt.dev/pkg/controller"
	"molt.dev/pkg/events"
	"molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/generated/informers/externalversions"
	"molt.dev/pkg/service"
)

// Source is the CloudEvent source of every event selector publishes.
const Source = "selector"

// Run starts selector and blocks until ctx is cancelled. With leader
// election on, a replica watches and admits only while it holds the Lease.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return service.Run(ctx, cfg.Options, func(ctx context.Context, rt *service.Runtime) error {
		if _, err := events.EnsureStream(ctx, rt.JetStream, events.StreamConfig{}); err != nil {
			return err
		}
		metrics, err := events.NewMetrics(rt.Registry)
		if err != nil {
			return fmt.Errorf("register event metrics: %w", err)
		}
		pub, err := events.NewPublisher(rt.JetStream, Source, metrics)
		if err != nil {
			return err
		}
		client, err := versioned.NewForConfig(rt.RestConfig)
		if err != nil {
			return fmt.Errorf("build agents client: %w", err)
		}
		admit := func(ctx context.Context) error { return runController(ctx, cfg, client, pub) }
		if !cfg.LeaderElect {
			return admit(ctx)
		}
		return runLeaderElected(ctx, rt.Kube, cfg.LeaderElectionNamespace, admit)
	})
}

// runController starts the informers (one shared factory) and the ops
// controller, and blocks until ctx is cancelled.
func runController(ctx context.Context, cfg Config, client versioned.Interface, pub *events.Publisher) error {
	factory := externalversions.NewSharedInformerFactory(client, 0)
	opsInformer := factory.Agents().V1alpha1().SandboxUpdateOps()
	sandboxInformer := factory.Agents().V1alpha1().Sandboxes()

	s := &Selector{
		client:         client,
		opsLister:      opsInformer.Lister(),
		sandboxLister:  sandboxInformer.Lister(),
		publisher:      pub,
		republishAfter: cfg.RepublishAfter,
		inflight:       newInflight(),
	}
	ctl := controller.New("selector", s.sync)
	s.enqueueAfter = ctl.EnqueueAfter
	handler := s.namespaceHandler(ctl.EnqueueKey)
	if _, err := opsInformer.Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("watch SandboxUpdateOps: %w", err)
	}
	if _, err := sandboxInformer.Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("watch Sandboxes: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	return ctl.Run(ctx, cfg.Workers, opsInformer.Informer().HasSynced, sandboxInformer.Informer().HasSynced)
}
