package statusagg

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// syncSandbox recomputes one sandbox's status and writes it if it changed:
//  1. load the sandbox from the cache (gone → forget its stage clock);
//  2. find its pod (named after it, owned by it);
//  3. recompute the status (desiredSandboxStatus), keeping the upgrade record;
//  4. skip if nothing changed, else UpdateStatus. A conflict means a newer
//     sandbox is on its way through the informer, which enqueues it again.
func (s *server) syncSandbox(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("split key %q: %w", key, err)
	}
	logger := klog.FromContext(ctx).WithValues("sandbox", klog.KRef(ns, name))
	sb, err := s.sandboxes.Sandboxes(ns).Get(name)
	if apierrors.IsNotFound(err) {
		s.clock.forget(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get sandbox %s: %w", key, err)
	}
	want := desiredSandboxStatus(sb, s.podOf(sb))
	if equality.Semantic.DeepEqual(sb.Status, want) {
		return nil
	}
	upd := sb.DeepCopy()
	upd.Status = want
	_, err = s.agents.AgentsV1alpha1().Sandboxes(ns).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		logger.V(4).Info("Skip status write: the sandbox changed meanwhile", "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("update status of sandbox %s: %w", key, err)
	}
	logger.V(2).Info("Updated sandbox status", "phase", want.Phase)
	return nil
}

// podOf returns the sandbox's pod from the cache: the pod named after it
// and owned by it, or nil.
func (s *server) podOf(sb *agentsv1alpha1.Sandbox) *corev1.Pod {
	pod, err := s.pods.Pods(sb.Namespace).Get(sb.Name)
	if err != nil {
		return nil
	}
	for _, ref := range pod.OwnerReferences {
		if ref.UID == sb.UID {
			return pod
		}
	}
	return nil
}

// enqueuePodOwner maps a pod event to its owning sandbox's key.
func (s *server) enqueuePodOwner(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	for _, ref := range pod.OwnerReferences {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err == nil && gv.Group == agentsv1alpha1.GroupName && ref.Kind == "Sandbox" && ref.Name == pod.Name {
			s.sandboxCtl.EnqueueKey(pod.Namespace + "/" + ref.Name)
			return
		}
	}
}

// podHandler enqueues the owning sandbox on every pod add, update and delete.
func (s *server) podHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    s.enqueuePodOwner,
		UpdateFunc: func(_, obj any) { s.enqueuePodOwner(obj) },
		DeleteFunc: s.enqueuePodOwner,
	}
}
