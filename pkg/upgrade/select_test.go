package upgrade

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// TestSelectSaysWhyASandboxIsExcluded: every sandbox of the namespace is
// either a candidate or excluded with the rule that left it out.
func TestSelectSaysWhyASandboxIsExcluded(t *testing.T) {
	yes := true
	box := func(name string, phase agentsv1alpha1.SandboxPhase, mutate func(*agentsv1alpha1.Sandbox)) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "a"}}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
		sb.Status.Phase = phase
		if mutate != nil {
			mutate(sb)
		}
		return sb
	}
	sandboxes := []*agentsv1alpha1.Sandbox{
		box("a-run", agentsv1alpha1.SandboxRunning, nil),
		box("b-other", agentsv1alpha1.SandboxRunning, func(sb *agentsv1alpha1.Sandbox) { sb.Labels["app"] = "b" }),
		box("c-paused", agentsv1alpha1.SandboxPaused, nil),
		box("d-pool", agentsv1alpha1.SandboxRunning, func(sb *agentsv1alpha1.Sandbox) {
			sb.OwnerReferences = []metav1.OwnerReference{{Kind: "SandboxSet", Name: "warm", Controller: &yes}}
		}),
		box("e-claimed", agentsv1alpha1.SandboxRunning, func(sb *agentsv1alpha1.Sandbox) { sb.Labels[agentsv1alpha1.LabelUpdateOps] = "busy" }),
		box("f-done", agentsv1alpha1.SandboxSucceeded, nil),
		box("g-same", agentsv1alpha1.SandboxRunning, func(sb *agentsv1alpha1.Sandbox) { sb.Spec.Template.Spec.Containers[0].Image = "img:v2" }),
	}
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns"}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v2"}]}}`)}
	sel, err := Select(ops, sandboxes, func(name string) bool { return name == "busy" })
	if err != nil {
		t.Fatal(err)
	}
	if len(sel.Candidates) != 1 || sel.Candidates[0].Sandbox.Name != "a-run" {
		t.Fatalf("candidates = %+v, want a-run alone", sel.Candidates)
	}
	want := map[string]string{"b-other": ExcludedSelector, "c-paused": ExcludedStateFilter, "d-pool": ExcludedPoolMember,
		"e-claimed": ExcludedOtherOps, "f-done": ExcludedFinished, "g-same": ExcludedNoNeed}
	if len(sel.Excluded) != len(want) {
		t.Fatalf("excluded = %d, want %d", len(sel.Excluded), len(want))
	}
	for _, e := range sel.Excluded {
		if want[e.Sandbox.Name] != e.Reason {
			t.Errorf("%s excluded as %s, want %s", e.Sandbox.Name, e.Reason, want[e.Sandbox.Name])
		}
	}
}
