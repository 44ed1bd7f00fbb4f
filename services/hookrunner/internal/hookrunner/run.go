package hookrunner

import (
	"context"

	"golang.org/x/sync/errgroup"

	"molt.dev/pkg/agentruntime"
	"molt.dev/pkg/events"
	"molt.dev/pkg/service"
)

// Run starts hookrunner and blocks until ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return service.Run(ctx, cfg.Options, func(ctx context.Context, rt *service.Runtime) error {
		h := &HookRunner{kube: rt.Kube, agents: rt.Agents, exec: agentruntime.Exec, killRun: agentruntime.Kill, reachWait: cfg.ReachWait}
		pre, err := rt.OpenEvents(ctx, events.ConsumerHookRunner, events.ConsumerConfig{})
		if err != nil {
			return err
		}
		post, err := pre.OpenConsumer(ctx, events.ConsumerHookRunnerPost, events.ConsumerConfig{})
		if err != nil {
			return err
		}
		h.publisher = pre.Publisher
		handle := events.FailOnLastDelivery(pre.Publisher, hookFailure, h.Handle)
		// preUpgrade and postUpgrade have a consumer and --max-hooks workers each: a new
		// pod's restore starts as soon as it is Ready, however many backups are queued.
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { return pre.Consume(gctx, handle, events.WithWorkers(cfg.MaxHooks)) })
		g.Go(func() error { return post.Consume(gctx, handle, events.WithWorkers(cfg.MaxHooks)) })
		return g.Wait()
	})
}

// hookFailure files an event the hookrunner could not handle under the
// step it starts: patched → PreUpgrade, pod-ready → PostUpgrade.
func hookFailure(ev events.Event) (events.StageFailure, bool) {
	switch ev.Type {
	case events.TypePatched:
		return events.StageFailure{Stage: preStep.stage, Reason: preStep.failReason}, true
	case events.TypePodReady:
		return events.StageFailure{Stage: postStep.stage, Reason: postStep.failReason}, true
	}
	return events.StageFailure{}, false
}
