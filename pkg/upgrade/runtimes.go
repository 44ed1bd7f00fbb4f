package upgrade

import (
	"slices"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// AgentRuntimeName is the spec.runtimes entry that has a sandbox's pod run an
// agent-runtime, the process hooks are run through.
const AgentRuntimeName = "agent-runtime"

// HasAgentRuntime reports whether sb asks for an agent-runtime: spec.runtimes
// lists AgentRuntimeName, or its runtime-url annotation names one itself.
func HasAgentRuntime(sb *agentsv1alpha1.Sandbox) bool {
	return sb.Annotations[agentsv1alpha1.AnnotationRuntimeURL] != "" ||
		slices.ContainsFunc(sb.Spec.Runtimes, func(r agentsv1alpha1.RuntimeConfig) bool { return r.Name == AgentRuntimeName })
}
