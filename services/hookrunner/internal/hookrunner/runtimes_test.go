package hookrunner

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// An unreachable agent-runtime's failure names a spec.runtimes without
// agent-runtime; any other failure, or a sandbox that lists it or names its
// runtime by annotation, is left as it is.
func TestWithRuntimesNote(t *testing.T) {
	unreachable := fmt.Errorf("call: %w", agentruntime.ErrUnreachable)
	sandbox := func(runtimes ...string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{}
		sb.Namespace, sb.Name = "ns", "box"
		for _, r := range runtimes {
			sb.Spec.Runtimes = append(sb.Spec.Runtimes, agentsv1alpha1.RuntimeConfig{Name: r})
		}
		return sb
	}
	const msg = "hook execution error: agent-runtime at http://10.0.0.1:49983 is not reachable"
	if got := withRuntimesNote(sandbox("csi", "agent-runtim"), unreachable, msg); !strings.HasPrefix(got, msg+"; ") || !strings.Contains(got, `it lists ["csi" "agent-runtim"]`) {
		t.Errorf("a misspelt runtime: %q", got)
	}
	if got := withRuntimesNote(sandbox("agent-runtime"), unreachable, msg); got != msg {
		t.Errorf("agent-runtime listed: %q", got)
	}
	if got := withRuntimesNote(sandbox(), errors.New("exit 1"), msg); got != msg {
		t.Errorf("another failure: %q", got)
	}
	byURL := sandbox()
	byURL.Annotations = map[string]string{agentsv1alpha1.AnnotationRuntimeURL: "http://runtime:49983"}
	if got := withRuntimesNote(byURL, unreachable, msg); got != msg {
		t.Errorf("runtime-url set: %q", got)
	}
}
