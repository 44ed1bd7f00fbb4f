package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// serialFloorRun times the one shape's pod replacements without molt: for
// each of n pods, one after the other, delete it, wait until it is gone,
// create a pod of the same name and wait until it is Ready. That is molt's
// UpgradePod stage on the same scheduler, kwok stages and node agent, so it
// is the least time the one shape (maxUnavailable 1) can take on this stack,
// whatever the services do.
func (b *bench) serialFloorRun(ctx context.Context, ns string, n int) (floorResult, error) {
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return floorResult{}, fmt.Errorf("create namespace %s: %w", ns, err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(b.kube, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke,
	}); err != nil {
		return floorResult{}, err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	factory.Start(wctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return floorResult{}, fmt.Errorf("serial floor: pod cache of %s did not sync", ns)
	}
	pods := inf.Lister().Pods(ns)
	wait := func(what string, done func() bool) error {
		deadline := time.NewTimer(time.Minute)
		defer deadline.Stop()
		for !done() {
			select {
			case <-changed:
			case <-deadline.C:
				return fmt.Errorf("serial floor: %s: not within a minute", what)
			case <-ctx.Done():
				return fmt.Errorf("serial floor: %s: %w", what, ctx.Err())
			}
		}
		return nil
	}
	name := func(i int) string { return fmt.Sprintf("sb-%04d", i) }

	if err := parallel(ctx, n, 32, func(i int) error {
		_, err := b.kube.CoreV1().Pods(ns).Create(ctx, floorPod(ns, name(i)), metav1.CreateOptions{})
		return err
	}); err != nil {
		return floorResult{}, fmt.Errorf("serial floor setup pods: %w", err)
	}
	for i := range n {
		if err := wait("pod "+name(i)+" Ready", func() bool { return podReady(pods, name(i), "") }); err != nil {
			return floorResult{}, err
		}
	}

	if err := b.waitNamespacesGone(ctx, []string{ns}); err != nil { // as floorRun
		return floorResult{}, err
	}
	start := time.Now()
	for i := range n {
		old, err := pods.Get(name(i))
		if err != nil {
			return floorResult{}, fmt.Errorf("serial floor: %w", err)
		}
		uid := old.UID
		if err := b.kube.CoreV1().Pods(ns).Delete(ctx, name(i), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
			return floorResult{}, fmt.Errorf("serial floor: delete pod %s: %w", name(i), err)
		}
		if err := wait("pod "+name(i)+" gone", func() bool {
			p, err := pods.Get(name(i))
			return apierrors.IsNotFound(err) || (err == nil && p.UID != uid)
		}); err != nil {
			return floorResult{}, err
		}
		created, err := b.kube.CoreV1().Pods(ns).Create(ctx, floorPod(ns, name(i)), metav1.CreateOptions{})
		if err != nil {
			return floorResult{}, fmt.Errorf("serial floor: create pod %s: %w", name(i), err)
		}
		if err := wait("new pod "+name(i)+" Ready", func() bool { return podReady(pods, name(i), created.UID) }); err != nil {
			return floorResult{}, err
		}
	}
	wall := time.Since(start)
	return floorResult{n: n, wall: wall, writes: 2}, b.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}

// podReady says whether the cache shows pod name Ready (of that uid, if set).
func podReady(pods listersv1.PodNamespaceLister, name string, uid types.UID) bool {
	p, err := pods.Get(name)
	if err != nil || (uid != "" && p.UID != uid) {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
