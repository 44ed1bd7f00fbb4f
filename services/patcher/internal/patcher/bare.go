package patcher

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// addedWithoutImage says why ops's patch cannot work on sb ("" when it may):
// it adds a container with no image, as a patch meant for a container this
// sandbox names otherwise does. Its pod would be refused at UpgradePod's dry
// run, after preUpgrade ran for nothing; the patch check before the ops's
// first sandbox looks at a few sandboxes only.
func addedWithoutImage(sb *agentsv1alpha1.Sandbox, ops *agentsv1alpha1.SandboxUpdateOps) string {
	bare := upgrade.AddedWithoutImage(sb.Spec.Template, ops.Spec.Patch.Raw)
	if len(bare) == 0 {
		return ""
	}
	return fmt.Sprintf("spec.patch of SandboxUpdateOps %s adds %s to sandbox %s/%s with no image: the template has no container of that name (it has %s), so its pod would be refused; the sandbox and its pod were not changed and preUpgrade did not run: fix the container's name in the patch (or the sandbox's template), then create a new SandboxUpdateOps",
		ops.Name, strings.Join(bare, ", "), sb.Namespace, sb.Name, containerNames(sb.Spec.Template))
}

// containerNames lists tpl's containers and init containers, as
// "containers/<name>" and "initContainers/<name>".
func containerNames(tpl *corev1.PodTemplateSpec) string {
	var names []string
	for _, c := range tpl.Spec.InitContainers {
		names = append(names, "initContainers/"+c.Name)
	}
	for _, c := range tpl.Spec.Containers {
		names = append(names, "containers/"+c.Name)
	}
	return strings.Join(names, ", ")
}
