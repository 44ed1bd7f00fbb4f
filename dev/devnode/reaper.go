package devnode

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"molt.dev/pkg/controller"
)

// Reaper removes pods that are being deleted gracefully from kwok nodes.
type Reaper struct {
	kube kubernetes.Interface
	pods corelisters.PodLister
	// deleted holds the UIDs this reaper has deleted: the cache shows such a
	// pod a moment longer, and deleting it again only earns a 404.
	deleted sync.Map
}

// RunReaper watches scheduled pods and finishes their deletion; it blocks
// until ctx is cancelled.
func RunReaper(ctx context.Context, kube kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" }))
	podInformer := factory.Core().V1().Pods()
	r := &Reaper{kube: kube, pods: podInformer.Lister()}
	ctl := controller.New("devnode-reaper", r.sync)
	if _, err := podInformer.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			pod, ok := obj.(*corev1.Pod)
			return ok && pod.DeletionTimestamp != nil
		},
		Handler: ctl.Handler(),
	}); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			r.deleted.Delete(pod.UID) // gone from the cache too: forget it
		}
	}}); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	return ctl.Run(ctx, 4, podInformer.Informer().HasSynced)
}

// sync deletes the pod now if it is terminating and nothing holds it, with a
// UID precondition so a recreated pod of the same name is never hit.
func (r *Reaper) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := r.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.DeletionTimestamp == nil || len(pod.Finalizers) > 0 {
		return nil
	}
	uid := pod.UID
	if _, done := r.deleted.Load(uid); done {
		return nil
	}
	err = r.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	switch {
	case err == nil:
		r.deleted.Store(uid, struct{}{})
		klog.FromContext(ctx).V(2).Info("pod deleted", "pod", klog.KObj(pod), "uid", uid)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Already gone, or the name now belongs to a newer pod.
		return nil
	default:
		return fmt.Errorf("delete pod %s/%s (uid %s): %w", ns, name, uid, err)
	}
}
