package podcycler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	agentsclient "molt.dev/pkg/generated/clientset/versioned"
)

// ensureAccessToken gives sb a runtime-access-token annotation, a random 32
// bytes in hex, unless it has one: the agent-runtime refuses every call
// without it, and OpenKruise's sandbox manager writes it the same way before
// a sandbox's first pod. It reports whether it wrote one. The merge patch
// carries sb's resourceVersion: when another writer changed the sandbox
// first it fails with a conflict, and the caller retries with the fresh
// sandbox, which may have a token by then.
func ensureAccessToken(ctx context.Context, agents agentsclient.Interface, sb *agentsv1alpha1.Sandbox) (bool, error) {
	if sb.Annotations[agentsv1alpha1.AnnotationRuntimeAccessToken] != "" {
		return false, nil
	}
	token := make([]byte, 32)
	_, _ = rand.Read(token) // never fails (crypto/rand)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": sb.ResourceVersion,
		"annotations":     map[string]string{agentsv1alpha1.AnnotationRuntimeAccessToken: hex.EncodeToString(token)},
	}})
	if err != nil {
		return false, fmt.Errorf("encode access token patch: %w", err)
	}
	if _, err := agents.AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("write access token of sandbox %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	return true, nil
}
