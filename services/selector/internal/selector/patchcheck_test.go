package selector

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// The patch is checked on the sandboxes it fits first: those it adds a
// container with no image to (named otherwise) go last, in their order.
func TestFitFirst(t *testing.T) {
	box := func(name, container string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: "v1"}}}}
		return sb
	}
	ops := &agentsv1alpha1.SandboxUpdateOps{}
	ops.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"main","env":[{"name":"A","value":"1"}]}]}}`)
	var names []string
	for _, sb := range fitFirst(ops, []*agentsv1alpha1.Sandbox{box("a", "sandbox"), box("b", "main"), box("c", "sandbox"), box("d", "main")}) {
		names = append(names, sb.Name)
	}
	if want := []string{"b", "d", "a", "c"}; !slices.Equal(names, want) {
		t.Errorf("fitFirst = %v, want %v", names, want)
	}
}
