package molt

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A plan names the stage a resume really starts from (upgrade.ResumeAt): a
// CheckpointFailed sandbox goes on from UpgradePod, or PreUpgrade with its
// original pod, never from Checkpointing.
func TestResumeNoteNamesWhereTheResumeStarts(t *testing.T) {
	for reason, want := range map[string]string{
		agentsv1alpha1.UpgradingReasonCheckpointFailed:  "from UpgradePod (from PreUpgrade if its original pod is still there)",
		agentsv1alpha1.UpgradingReasonUpgradePodFailed:  "from UpgradePod (from PreUpgrade if its original pod is still there)",
		agentsv1alpha1.UpgradingReasonPreUpgradeFailed:  "from PreUpgrade",
		agentsv1alpha1.UpgradingReasonPostUpgradeFailed: "from PostUpgrade if its pod already runs the patched template",
	} {
		if got := resumeNote(reason); !strings.Contains(got, want) {
			t.Errorf("resumeNote(%s) = %q, want it to say %q", reason, got, want)
		}
	}
}

// A plan of an ops with hooks names the sandboxes it would upgrade whose
// spec.runtimes lists no agent-runtime; without hooks it names none.
func TestWithoutAgentRuntime(t *testing.T) {
	sandbox := func(name string, runtimes ...string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{}
		sb.Name = name
		for _, r := range runtimes {
			sb.Spec.Runtimes = append(sb.Spec.Runtimes, agentsv1alpha1.RuntimeConfig{Name: r})
		}
		return sb
	}
	sel := upgrade.Selection{Candidates: []upgrade.Candidate{
		{Sandbox: sandbox("listed", "agent-runtime", "csi")},
		{Sandbox: sandbox("misspelt", "agent-runtim")},
		{Sandbox: sandbox("none")},
		{Sandbox: sandbox("done"), State: upgrade.Updated},
	}}
	ops := &agentsv1alpha1.SandboxUpdateOps{}
	if got := withoutAgentRuntime(ops, sel); got != nil {
		t.Errorf("an ops without hooks: %v", got)
	}
	ops.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{}}
	if got := strings.Join(withoutAgentRuntime(ops, sel), ","); got != "misspelt,none" {
		t.Errorf("an ops with a preUpgrade: %q, want misspelt,none", got)
	}
}

// A plan names every sandbox to start whose template the patch would add a
// container with no image to (its container is named otherwise), not only
// the first sandbox's.
func TestImagelessAdds(t *testing.T) {
	sandbox := func(name, container string, state upgrade.State) upgrade.Candidate {
		sb := &agentsv1alpha1.Sandbox{}
		sb.Name = name
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: "v1"}}}}
		return upgrade.Candidate{Sandbox: sb, State: state}
	}
	sel := upgrade.Selection{Candidates: []upgrade.Candidate{
		sandbox("s-0", "sandbox", upgrade.NotStarted),
		sandbox("s-2", "main", upgrade.NotStarted),
		sandbox("s-4", "main", upgrade.NotStarted),
		sandbox("s-5", "main", upgrade.Failed),
	}}
	ops := &agentsv1alpha1.SandboxUpdateOps{}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","env":[{"name":"A","value":"1"}]}]}}`)}
	names, added := imagelessAdds(ops, sel)
	if strings.Join(names, ",") != "s-2,s-4" || strings.Join(added, ",") != "containers/sandbox" {
		t.Errorf("imagelessAdds = %v, %v; want [s-2 s-4] [containers/sandbox]", names, added)
	}
}

// TestNamedSandboxesAgreeWithTheirCount: plan's warnings name at most five
// sandboxes and say how many more, and their words agree with the count.
func TestNamedSandboxesAgreeWithTheirCount(t *testing.T) {
	one := namedSandboxes([]string{"a"})
	if got := fmt.Sprintf("%s (%s) %s %s %s", one, one.names(), one.verb("has", "have"), one.its(), one.it()); got != "1 sandbox (a) has its it" {
		t.Errorf("one sandbox: %q", got)
	}
	seven := namedSandboxes([]string{"a", "b", "c", "d", "e", "f", "g"})
	if got := fmt.Sprintf("%s (%s) %s %s %s", seven, seven.names(), seven.verb("has", "have"), seven.its(), seven.it()); got != "7 sandboxes (a, b, c, d, e and 2 more) have their them" {
		t.Errorf("seven sandboxes: %q", got)
	}
}
