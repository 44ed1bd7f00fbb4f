package upgrade

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
)

// LoadClaimed reads a sandbox for an event of attempt of the ops named opsName
// ("" for a direct upgrade), at least as new as resourceVersion, the version the event
// says the previous stage wrote or read (events.Data.SandboxResourceVersion).
// A nil sandbox with a non-empty skip says why the event is stale: the sandbox
// is gone, was recreated, or is no longer claimed by it (ClaimedBy: another
// ops, or another attempt of an ops of the same name).
//
// With a resourceVersion the API server answers from its watch cache, once
// that cache holds the version, instead of reading etcd: the previous stage's
// write is in what it returns, and so is any later one the cache has. Without
// one (an event of an earlier molt, a watchdog's re-drive), or when the cache
// does not catch up in time, it reads from etcd.
func LoadClaimed(ctx context.Context, client versioned.Interface, namespace, name string, uid types.UID, opsName, attempt, resourceVersion string) (sb *agentsv1alpha1.Sandbox, skip string, err error) {
	sb, err = GetAtLeast(ctx, client, namespace, name, resourceVersion)
	if apierrors.IsNotFound(err) {
		return nil, "sandbox is gone", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("get sandbox %s/%s: %w", namespace, name, err)
	}
	if sb.UID != uid || !ClaimedBy(sb, opsName, attempt) {
		return nil, "sandbox is no longer claimed by this ops", nil
	}
	return sb, "", nil
}

// cacheReadTimeout bounds a read from the watch cache: the API server waits
// up to 3s for its cache to reach the version, and client-go retries its
// "Too large resource version" answer up to ten times.
const cacheReadTimeout = 4 * time.Second

// GetAtLeast reads a sandbox at least as new as resourceVersion from the API
// server's watch cache, and from etcd when resourceVersion is empty or the
// cache's answer is an error other than NotFound (a version the cache has not
// reached within cacheReadTimeout).
func GetAtLeast(ctx context.Context, client versioned.Interface, namespace, name, resourceVersion string) (*agentsv1alpha1.Sandbox, error) {
	sandboxes := client.AgentsV1alpha1().Sandboxes(namespace)
	if resourceVersion != "" {
		cacheCtx, cancel := context.WithTimeout(ctx, cacheReadTimeout)
		sb, err := sandboxes.Get(cacheCtx, name, metav1.GetOptions{ResourceVersion: resourceVersion})
		cancel()
		if err == nil || apierrors.IsNotFound(err) {
			return sb, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		klog.FromContext(ctx).V(2).Info("Reading the sandbox from etcd: the watch cache did not answer", "sandbox", klog.KRef(namespace, name), "resourceVersion", resourceVersion, "err", err)
	}
	return sandboxes.Get(ctx, name, metav1.GetOptions{})
}
