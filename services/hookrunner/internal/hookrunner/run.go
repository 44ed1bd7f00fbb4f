package hookrunner

import (
	"context"

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
		h := &HookRunner{kube: rt.Kube, agents: rt.Agents, exec: agentruntime.Exec, reachWait: cfg.ReachWait}
		ep, err := rt.OpenEvents(ctx, events.ConsumerHookRunner, events.ConsumerConfig{})
		if err != nil {
			return err
		}
		h.publisher = ep.Publisher
		handle := events.FailOnLastDelivery(ep.Publisher, hookFailure, h.Handle)
		return ep.Consume(ctx, handle, events.WithWorkers(cfg.MaxHooks))
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
