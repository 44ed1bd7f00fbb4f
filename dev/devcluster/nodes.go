package devcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KwokNodeAnnotation marks the nodes kwok manages.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// NodeName is the name of the i-th kwok node.
func NodeName(i int) string { return fmt.Sprintf("kwok-node-%d", i) }

// EnsureNodes creates n kwok nodes (if missing) and waits until each is Ready
// and carries no taint, so the scheduler can place pods on it.
func EnsureNodes(ctx context.Context, kube kubernetes.Interface, n int) error {
	for i := 0; i < n; i++ {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        NodeName(i),
				Annotations: map[string]string{KwokNodeAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels: map[string]string{
					"type": "kwok", "kubernetes.io/hostname": NodeName(i), "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				},
			},
			Status: corev1.NodeStatus{
				Allocatable: nodeResources(),
				Capacity:    nodeResources(),
			},
		}
		if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", node.Name, err)
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var notReady []string
		for i := 0; i < n; i++ {
			node, err := kube.CoreV1().Nodes().Get(ctx, NodeName(i), metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get node %s: %w", NodeName(i), err)
			}
			if !nodeSchedulable(node) {
				notReady = append(notReady, node.Name)
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kwok nodes %v not Ready and untainted after 90s: kwok marks them Ready, kube-controller-manager removes the not-ready taint", notReady)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func nodeSchedulable(node *corev1.Node) bool {
	if len(node.Spec.Taints) > 0 {
		return false
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeResources() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    mustQuantity("64"),
		corev1.ResourceMemory: mustQuantity("512Gi"),
		corev1.ResourcePods:   mustQuantity("5000"),
	}
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }
