package hookrunner

import (
	"errors"
	"fmt"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// withRuntimesNote adds to the failure message of a hook whose agent-runtime
// did not answer that sb does not ask for one in spec.runtimes (a typo, or the
// entry left out): on a cluster its pod then runs none, and every hook fails
// so until the entry is there. A sandbox with a runtime-url annotation names
// its runtime itself.
func withRuntimesNote(sb *agentsv1alpha1.Sandbox, err error, message string) string {
	if !errors.Is(err, agentruntime.ErrUnreachable) || upgrade.HasAgentRuntime(sb) {
		return message
	}
	names := make([]string, 0, len(sb.Spec.Runtimes))
	for _, r := range sb.Spec.Runtimes {
		names = append(names, r.Name)
	}
	return upgrade.WithNote(message, fmt.Sprintf("sandbox %s/%s does not list %s in spec.runtimes (it lists %q), which hooks need (the guides ask for `runtimes: [{name: %s}]`): if its pod runs no agent-runtime, add the entry to the sandbox (to the SandboxSet, for a pool member) so its pods get one, or upgrade it without hooks",
		sb.Namespace, sb.Name, upgrade.AgentRuntimeName, names, upgrade.AgentRuntimeName))
}
