package podcycler

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// sandboxKind is the owner kind of every pod podcycler creates.
var sandboxKind = agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox")

// buildPod returns the pod of sb built from its spec.template: named after the sandbox,
// the template's labels plus pod-template-hash=<revision>, the template's annotations plus,
// for an upgrade, molt.dev/attempt=<attempt> and molt.dev/ops=<ops name>, and a controller
// reference to the sandbox.
func buildPod(sb *agentsv1alpha1.Sandbox, revision, attempt, ops string) *corev1.Pod {
	return buildPodFrom(sb, sb.Spec.Template, revision, attempt, ops)
}

// buildPodFrom is buildPod from tpl instead of sb's spec.template (revision is
// tpl's).
func buildPodFrom(sb *agentsv1alpha1.Sandbox, tpl *corev1.PodTemplateSpec, revision, attempt, ops string) *corev1.Pod {
	labels := maps.Clone(tpl.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[agentsv1alpha1.LabelPodTemplateHash] = revision
	annotations := maps.Clone(tpl.Annotations)
	if attempt != "" {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[upgrade.AnnotationPodAttempt] = attempt
		if ops != "" {
			annotations[upgrade.AnnotationPodOps] = ops
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            sb.Name,
			Namespace:       sb.Namespace,
			Labels:          labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, sandboxKind)},
		},
		Spec: *tpl.Spec.DeepCopy(),
	}
}

// ownerSandbox returns the namespace/name key of the Sandbox that controls pod, if any.
func ownerSandbox(pod *corev1.Pod) (string, bool) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != sandboxKind.Kind || ref.APIVersion != sandboxKind.GroupVersion().String() {
		return "", false
	}
	return pod.Namespace + "/" + ref.Name, true
}

// ownedBy reports whether pod is controlled by the sandbox with uid.
func ownedBy(pod *corev1.Pod, uid types.UID) bool { return upgrade.ControlledBy(pod, uid) }

// createPod creates pod and counts it under reason. It reports created=false, and no
// error, when a pod of that name already exists: creation is by name, so a second
// writer racing for the same pod is harmless.
func (c *cycler) createPod(ctx context.Context, pod *corev1.Pod, reason string) (created *corev1.Pod, err error) {
	created, err = c.kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("create pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.metrics.created.WithLabelValues(reason).Inc()
	return created, nil
}

// deletePod deletes the pod namespace/name only if it still has uid, and counts it under
// reason. A pod already gone, or a name that now belongs to a newer pod, is not an error.
func (c *cycler) deletePod(ctx context.Context, namespace, name string, uid types.UID, reason string) error {
	err := c.kube.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	case err != nil:
		return fmt.Errorf("delete pod %s/%s (uid %s): %w", namespace, name, uid, err)
	}
	c.metrics.deleted.WithLabelValues(reason).Inc()
	return nil
}
