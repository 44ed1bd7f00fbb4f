package upgrade

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
)

// LoadClaimed reads a sandbox from the API server (not a cache: the previous
// stage has just written it) for an event of the ops named opsName ("" for a
// direct upgrade). A nil sandbox with a non-empty skip says why the event is
// stale: the sandbox is gone, was recreated, or is no longer claimed by it.
func LoadClaimed(ctx context.Context, client versioned.Interface, namespace, name string, uid types.UID, opsName string) (sb *agentsv1alpha1.Sandbox, skip string, err error) {
	sb, err = client.AgentsV1alpha1().Sandboxes(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "sandbox is gone", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("get sandbox %s/%s: %w", namespace, name, err)
	}
	if sb.UID != uid || sb.Labels[agentsv1alpha1.LabelUpdateOps] != opsName {
		return nil, "sandbox is no longer claimed by this ops", nil
	}
	return sb, "", nil
}
