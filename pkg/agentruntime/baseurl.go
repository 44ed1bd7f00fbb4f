package agentruntime

import (
	"net"
	"strconv"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// Port is where the agent-runtime listens in every sandbox pod.
const Port = 49983

// BaseURL returns the agent-runtime address of a sandbox: its
// agents.kruise.io/runtime-url annotation when set, else
// http://<podIP>:49983.
func BaseURL(annotations map[string]string, podIP string) string {
	if u := annotations[agentsv1alpha1.AnnotationRuntimeURL]; u != "" {
		return u
	}
	return "http://" + net.JoinHostPort(podIP, strconv.Itoa(Port))
}

// BaseURLSource says where BaseURL took its address from, for messages:
// the sandbox's runtime-url annotation, or the pod's IP.
func BaseURLSource(annotations map[string]string) string {
	if annotations[agentsv1alpha1.AnnotationRuntimeURL] != "" {
		return "the sandbox's annotation " + agentsv1alpha1.AnnotationRuntimeURL
	}
	return "the pod's IP"
}

// AccessToken returns the token a sandbox's agent-runtime expects in
// X-Access-Token (its agents.kruise.io/runtime-access-token annotation), or
// "" when it expects none.
func AccessToken(annotations map[string]string) string {
	return annotations[agentsv1alpha1.AnnotationRuntimeAccessToken]
}
