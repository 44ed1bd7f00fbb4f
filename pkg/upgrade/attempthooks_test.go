package upgrade

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// An attempt runs the hooks fixed when it began, whatever spec.lifecycle
// says since; any other attempt, or a value that cannot be read, runs the
// sandbox's spec.lifecycle.
func TestHooksFor(t *testing.T) {
	begun, edited := hooks("backup to a"), hooks("backup to b")
	sb := &agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{Lifecycle: edited}}
	sb.Annotations = map[string]string{AnnotationAttemptHooks: AttemptHooksValue("uid-1", begun)}
	if got := HooksFor(sb, "uid-1"); !equality.Semantic.DeepEqual(got, begun) {
		t.Errorf("the attempt that began with them: %+v, want its hooks", got)
	}
	if got := HooksFor(sb, "uid-2"); !equality.Semantic.DeepEqual(got, edited) {
		t.Errorf("another attempt: %+v, want spec.lifecycle", got)
	}
	sb.Annotations[AnnotationAttemptHooks] = AttemptHooksValue("uid-1", nil)
	if got := HooksFor(sb, "uid-1"); got != nil {
		t.Errorf("an attempt that began with none: %+v, want none (a postUpgrade added since restores no backup of its)", got)
	}
	sb.Annotations[AnnotationAttemptHooks] = "{"
	if got := HooksFor(sb, "uid-1"); !equality.Semantic.DeepEqual(got, edited) {
		t.Errorf("a value that cannot be read: %+v, want spec.lifecycle", got)
	}
}
