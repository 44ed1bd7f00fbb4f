package podcycler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A pod the API server refuses (here: Invalid, a container name the pod
// validation refuses and the Sandbox schema lets through) leaves the sandbox
// Pending; podcycler records the server's words on the sandbox for statusagg
// to show, keeps trying, and removes them once the pod is created.
func TestRefusedPodCreateIsRecordedUntilThePodIsCreated(t *testing.T) {
	startPodcycler(t)
	ctx := context.Background()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sbx-refused", Namespace: ns}}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "Main_1", Image: "registry.example/sandbox:v1"}}}}
	sb, err := agents(t).AgentsV1alpha1().Sandboxes(ns).Create(ctx, sb, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}

	testenv.Eventually(t, 60*time.Second, "the refusal recorded on the sandbox", func() (bool, error) {
		got, err := agents(t).AgentsV1alpha1().Sandboxes(ns).Get(ctx, sb.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v := got.Annotations[upgrade.AnnotationPodCreateError]
		if !strings.Contains(v, "Invalid") || !strings.Contains(v, "sbx-refused") {
			return false, fmt.Errorf("annotation %s = %q", upgrade.AnnotationPodCreateError, v)
		}
		return true, nil
	})

	// The user fixes the template.
	updateSandbox(t, ns, sb.Name, func(s *agentsv1alpha1.Sandbox) { s.Spec.Template.Spec.Containers[0].Name = "main" })
	waitPodReady(t, ns, sb.Name, "")
	testenv.Eventually(t, 60*time.Second, "the refusal removed once the pod exists", func() (bool, error) {
		got, err := agents(t).AgentsV1alpha1().Sandboxes(ns).Get(ctx, sb.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if v, ok := got.Annotations[upgrade.AnnotationPodCreateError]; ok {
			return false, fmt.Errorf("annotation %s still %q", upgrade.AnnotationPodCreateError, v)
		}
		return true, nil
	})
}
