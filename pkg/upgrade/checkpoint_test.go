package upgrade

import (
	"strings"
	"testing"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

func TestWithNoteKeepsTheNextStep(t *testing.T) {
	note := CheckpointKeptNote("team-a", "box-0", "ckpt-123")
	long := strings.Repeat("container main: CrashLoopBackOff - back-off restarting failed container ", 30)
	got := WithNote(long, note)
	if len(got) > agentsv1alpha1.MaxConditionMessageLength || !strings.HasSuffix(got, "; "+note) || !strings.HasPrefix(got, "container main: CrashLoopBackOff") {
		t.Errorf("WithNote = %q (%d bytes): want the cause cut, then the whole note, within %d bytes", got, len(got), agentsv1alpha1.MaxConditionMessageLength)
	}
	if got := WithNote("short cause", note); got != "short cause; "+note {
		t.Errorf("WithNote = %q", got)
	}
	if !strings.Contains(note, "kubectl get cp -n team-a -l molt.dev/sandbox=box-0") {
		t.Errorf("note %q does not say how to find the checkpoint", note)
	}
}
