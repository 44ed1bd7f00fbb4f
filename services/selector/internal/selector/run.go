package selector

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"

	"molt.dev/pkg/controller"
	"molt.dev/pkg/events"
	"molt.dev/pkg/generated/informers/externalversions"
	"molt.dev/pkg/service"
	"molt.dev/pkg/upgrade"
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
		// The selector only publishes (requested); it reads how attempts
		// end from the Sandbox status.
		ep, err := rt.OpenEvents(ctx, Source, events.ConsumerConfig{PublishOnly: true})
		if err != nil {
			return err
		}
		pub := ep.Publisher
		admit := func(ctx context.Context) error { return runController(ctx, cfg, rt, pub) }
		return cfg.LeaderElection.Run(ctx, rt, admit)
	})
}

// runController starts the informers (one shared factory) and the ops
// controller, and blocks until ctx is cancelled. The replica is ready once
// its caches have synced: one whose list or watch is refused (RBAC) shows
// not ready, naming the caches, instead of admitting nothing in silence.
func runController(ctx context.Context, cfg Config, rt *service.Runtime, pub *events.Publisher) error {
	client, kube, queues := rt.Agents, rt.Kube, rt.Queues
	factory := externalversions.NewSharedInformerFactoryWithOptions(client, 0, externalversions.WithTransform(controller.StripManagedFields))
	opsInformer := factory.Agents().V1alpha1().SandboxUpdateOps()
	sandboxInformer := factory.Agents().V1alpha1().Sandboxes()

	s := &Selector{
		client:         client,
		kube:           kube,
		opsLister:      opsInformer.Lister(),
		sandboxLister:  sandboxInformer.Lister(),
		publisher:      pub,
		republishAfter: cfg.RepublishAfter,
		inflight:       newInflight(),
	}
	ctl := controller.New("selector", s.sync, controller.WithMetrics(queues))
	s.enqueueAfter = ctl.EnqueueAfter
	handler := s.namespaceHandler(ctl.EnqueueKey)
	if _, err := opsInformer.Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("watch SandboxUpdateOps: %w", err)
	}
	if _, err := sandboxInformer.Informer().AddEventHandler(s.sandboxHandler(ctl.EnqueueKey, ctl.EnqueueAfter)); err != nil {
		return fmt.Errorf("watch Sandboxes: %w", err)
	}
	// Direct upgrades (spec.upgradePolicy, no ops) watch pods built by
	// podcycler (they carry pod-template-hash) to compare revisions. Deployments' pods carry
	// it too, and are cached as stubs only (controller.SandboxPodsOnly).
	podFactory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTransform(controller.SandboxPodsOnly), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = agentsv1alpha1.LabelPodTemplateHash
	}))
	podInformer := podFactory.Core().V1().Pods()
	s.pods = podInformer.Lister()
	d := &direct{client: client, sandboxes: sandboxInformer.Lister(), ops: opsInformer.Lister(), pods: podInformer.Lister(), publisher: pub, republishAfter: cfg.RepublishAfter}
	s.pendingDirect = d.pendingDirect
	directCtl := controller.New("selector-direct", d.sync, controller.WithMetrics(queues))
	d.later = directCtl.EnqueueAfter
	if _, err := sandboxInformer.Informer().AddEventHandler(directCtl.Handler()); err != nil {
		return fmt.Errorf("watch Sandboxes: %w", err)
	}
	if _, err := opsInformer.Informer().AddEventHandler(d.opsEndedHandler(directCtl.EnqueueKey)); err != nil {
		return fmt.Errorf("watch SandboxUpdateOps: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(podOwnerHandler(directCtl.EnqueueKey)); err != nil {
		return fmt.Errorf("watch Pods: %w", err)
	}
	// The SandboxSet warm pools. A refused template is recorded on its set
	// (upgrade.AnnotationTemplateCheck), and so are dead members kept
	// (upgrade.AnnotationMembersFailing), which statusagg shows.
	setInformer := factory.Agents().V1alpha1().SandboxSets()
	pl := &pool{
		client: client, sets: setInformer.Lister(), sandboxes: sandboxInformer.Lister(),
		dryRun: func(ctx context.Context, pod *corev1.Pod) (string, error) {
			return upgrade.DryRunCreatePod(ctx, kube, pod)
		},
		memberDryRun: func(ctx context.Context, sb *agentsv1alpha1.Sandbox) (string, error) {
			_, err := client.AgentsV1alpha1().Sandboxes(sb.Namespace).Create(ctx, sb, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if words := upgrade.PodRefusal(err); words != "" || err == nil {
				return upgrade.StableRefusal(words, strings.TrimSuffix(sb.GenerateName, "-")), nil
			}
			return "", err
		},
		record: func(ctx context.Context, set *agentsv1alpha1.SandboxSet, key, value string) error {
			var v *string
			if value != "" {
				v = &value
			}
			patch := metaPatch{Metadata: metaFields{Annotations: map[string]*string{key: v}}}
			_, err := client.AgentsV1alpha1().SandboxSets(set.Namespace).Patch(ctx, set.Name, types.MergePatchType, patch.encode(), metav1.PatchOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		},
		expect: map[string]*expectation{}, checks: map[string]templateCheck{}, deaths: map[string]deaths{},
	}
	poolCtl := controller.New("selector-pool", pl.sync, controller.WithMetrics(queues))
	pl.enqueueAfter = poolCtl.EnqueueAfter
	if _, err := setInformer.Informer().AddEventHandler(poolHandler(poolCtl.EnqueueKey)); err != nil {
		return fmt.Errorf("watch SandboxSets: %w", err)
	}
	if _, err := sandboxInformer.Informer().AddEventHandler(poolHandler(poolCtl.EnqueueKey)); err != nil {
		return fmt.Errorf("watch Sandboxes: %w", err)
	}
	factory.Start(ctx.Done())
	podFactory.Start(ctx.Done())
	defer factory.Shutdown()
	defer podFactory.Shutdown()
	synced := []cache.InformerSynced{opsInformer.Informer().HasSynced, sandboxInformer.Informer().HasSynced, podInformer.Informer().HasSynced, setInformer.Informer().HasSynced}
	rt.ReadyWhenSynced("ops, sandbox, pod and SandboxSet caches", synced...)
	errs := make(chan error, 2)
	go func() { errs <- directCtl.Run(ctx, 1, synced...) }()
	go func() { errs <- poolCtl.Run(ctx, 2, synced...) }()
	err := ctl.Run(ctx, cfg.Workers, synced...)
	return errors.Join(err, <-errs, <-errs)
}
