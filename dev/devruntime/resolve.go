package devruntime

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/generated/clientset/versioned"
)

// SandboxEndpoint returns the agent-runtime base URL and access token of
// sandbox namespace/name the way hookrunner finds them: the sandbox's
// runtime-url annotation, else the IP of its pod (named after the sandbox
// and controlled by it); the token from its runtime-access-token annotation
// (podcycler writes one before it creates the sandbox's first pod). A
// sandbox without a token is an error: the runtime would refuse every call.
func SandboxEndpoint(ctx context.Context, kube kubernetes.Interface, agents versioned.Interface, namespace, name string) (baseURL, token string, err error) {
	sb, err := agents.AgentsV1alpha1().Sandboxes(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("get sandbox %s/%s: %w", namespace, name, err)
	}
	token = agentruntime.AccessToken(sb.Annotations)
	if token == "" {
		return "", "", fmt.Errorf("sandbox %s/%s has no %s annotation: its agent-runtime refuses every call", namespace, name, agentsv1alpha1.AnnotationRuntimeAccessToken)
	}
	pod, err := kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && sb.Spec.Paused {
		return "", "", fmt.Errorf("sandbox %s/%s is paused (spec.paused: true), so it has no pod to run in: unpause it with `kubectl patch sbx %s -n %s --type merge -p '{\"spec\":{\"paused\":false}}'`", namespace, name, name, namespace)
	}
	if err != nil {
		return "", "", fmt.Errorf("get pod of sandbox %s/%s: %w", namespace, name, err)
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != sb.UID {
		return "", "", fmt.Errorf("pod %s/%s is not controlled by sandbox %s", namespace, name, name)
	}
	if pod.Status.PodIP == "" {
		return "", "", fmt.Errorf("pod %s/%s has no IP yet", namespace, name)
	}
	return agentruntime.BaseURL(sb.Annotations, pod.Status.PodIP), token, nil
}
