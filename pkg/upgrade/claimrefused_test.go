package upgrade

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// A sandbox whose claim the API server refused stays counted as not started, is never
// admitted again by the ops (the next one takes its place in the budget), and once it
// is all that is left with nothing upgrading, the selection is stuck.
func TestRefusedClaimsAreCountedNotAdmitted(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "u1"}}
	ops.Spec.Selector = &metav1.LabelSelector{}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v2"}]}}`)}
	two := intstr.FromInt32(2)
	ops.Spec.UpdateStrategy.MaxUnavailable = &two
	value, added := WithClaimRefused(ops, map[string]string{"b": "frozen"})
	if !added {
		t.Fatal("WithClaimRefused added nothing")
	}
	ops.Annotations = map[string]string{AnnotationClaimRefused: value}
	if _, again := WithClaimRefused(ops, map[string]string{"b": "frozen"}); again {
		t.Error("the same refusal added twice")
	}
	box := func(name string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
		sb.Status.Phase = agentsv1alpha1.SandboxRunning
		return sb
	}
	sel, err := Select(ops, []*agentsv1alpha1.Sandbox{box("a"), box("b"), box("c")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sel.NotStarted != 3 || sel.Refused != 1 || sel.Total() != 3 {
		t.Fatalf("not started %d, refused %d, total %d; want 3, 1, 3", sel.NotStarted, sel.Refused, sel.Total())
	}
	if admit := sel.ToAdmit(); len(admit) != 2 || admit[0].Sandbox.Name != "a" || admit[1].Sandbox.Name != "c" {
		t.Fatalf("admits %+v, want a and c (b refused)", admit)
	}
	if sel.Stuck() {
		t.Error("stuck with a and c still to start")
	}
	sel.Candidates[0].State, sel.Candidates[2].State = Updated, Updated
	sel.Updated, sel.NotStarted = 2, 1
	if !sel.Stuck() {
		t.Error("not stuck with only the refused b left and nothing upgrading")
	}
}

// The annotation names every refused sandbox, with the server's words for the first
// maxClaimRefusedWords; the note names them with the words, counts the rest, and says
// what to do.
func TestClaimRefusedIsBounded(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns"}}
	many := map[string]string{}
	for i := range maxClaimRefusedWords + 5 {
		many[fmt.Sprintf("sbx-%02d", i)] = "denied"
	}
	value, _ := WithClaimRefused(ops, many)
	ops.Annotations = map[string]string{AnnotationClaimRefused: value}
	got := ClaimRefused(ops)
	words := 0
	for _, w := range got {
		if w != claimRefusedElided {
			words++
		}
	}
	if len(got) != len(many) || words != maxClaimRefusedWords {
		t.Errorf("annotation names %d with %d words, want all %d, the words of %d", len(got), words, len(many), maxClaimRefusedWords)
	}
	// Every one of them counts as refused, so an ops left with only them is stuck.
	sandboxes := []*agentsv1alpha1.Sandbox{}
	for name := range many {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
		sb.Status.Phase = agentsv1alpha1.SandboxRunning
		sandboxes = append(sandboxes, sb)
	}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v2"}]}}`)}
	sel, err := Select(ops, sandboxes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Refused != len(many) || !sel.Stuck() || len(sel.ToAdmit()) != 0 {
		t.Errorf("refused %d, stuck %t, admits %d; want all %d refused, stuck, none admitted", sel.Refused, sel.Stuck(), len(sel.ToAdmit()), len(many))
	}
	if note := ClaimRefusedNote("ns", "up", got); !strings.Contains(note, "and 5 more") {
		t.Errorf("note %q does not count the sandboxes past the words", note)
	}
	note := ClaimRefusedNote("ns", "up", map[string]string{"sbx-1": "frozen"})
	for _, want := range []string{"refused the write that claims 1 sandbox for this ops (its label agents.kruise.io/update-ops), so it is not upgraded", "sbx-1: frozen", "kubectl molt retry up -n ns"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
}
