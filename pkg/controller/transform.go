package controller

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StripManagedFields is an informer transform (the factories' WithTransform)
// that drops metadata.managedFields before an object is cached. No service
// reads them, and they are most of a cached object: about two thirds of a
// Sandbox's bytes and half of a Pod's once statusagg, the patcher and the
// scheduler have written them, so at 10,000 sandboxes they decided whether
// a service stays under 300 MB. Writing back an object read from such a
// cache is safe: the API server keeps the managedFields of an update that
// carries none.
func StripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// SandboxPodsOnly is StripManagedFields, and for a pod that no Sandbox
// controls it also drops all but the pod's identity, labels, owners and
// deletion mark. The services' pod informers select on pod-template-hash,
// the label podcycler gives every sandbox pod, but the Deployment controller
// gives the same label to every pod it creates: without this, a cluster's
// Deployment pods would be cached whole, spec and status, by every molt
// service. What is kept is enough for the handlers' checks (a pod of a
// sandbox's name that the sandbox does not control is left alone).
func SandboxPodsOnly(obj any) (any, error) {
	obj, err := StripManagedFields(obj)
	pod, ok := obj.(*corev1.Pod)
	if !ok || err != nil {
		return obj, err
	}
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "Sandbox" && strings.HasPrefix(ref.APIVersion, sandboxGroup+"/") {
		return pod, nil
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		Labels: pod.Labels, OwnerReferences: pod.OwnerReferences, DeletionTimestamp: pod.DeletionTimestamp,
	}}, nil
}

// sandboxGroup is the API group of the Sandbox kind.
const sandboxGroup = "agents.kruise.io"
