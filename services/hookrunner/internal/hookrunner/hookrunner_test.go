package hookrunner

import (
	"testing"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

func TestHookFor(t *testing.T) {
	pre := &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"true"}}}
	sb := &agentsv1alpha1.Sandbox{}
	if hookFor(sb, "uid-1", preStep.stage) != nil {
		t.Fatal("hook without lifecycle")
	}
	sb.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: pre}
	if hookFor(sb, "uid-1", preStep.stage) != pre || hookFor(sb, "uid-1", postStep.stage) != nil {
		t.Fatal("hookFor picked the wrong hook")
	}
}

func TestConfigNamesTheFlag(t *testing.T) {
	c := Config{MaxHooks: 0}
	if err := c.Validate(); err == nil || err.Error() != "flag --max-hooks=0: must be at least 1" {
		t.Fatalf("Validate = %v", err)
	}
}
