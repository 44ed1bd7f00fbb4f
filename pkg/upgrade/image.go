package upgrade

import (
	"fmt"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
)

// ImageProblem says which image of spec's containers and init containers the kubelet
// could not parse (it would leave the pod in InvalidImageName), and why; "" when every
// image parses. The API server accepts such an image (it checks only that it is not
// empty and has no surrounding spaces), so a server-side dry run does not catch it,
// and a pod replaced by one would be gone for nothing. An empty image is left to the
// API server, which names the field.
func ImageProblem(spec *corev1.PodSpec) string {
	for _, list := range []struct {
		field      string
		containers []corev1.Container
	}{{"containers", spec.Containers}, {"initContainers", spec.InitContainers}} {
		for i, c := range list.containers {
			if c.Image == "" {
				continue
			}
			if _, err := reference.ParseNormalizedNamed(c.Image); err != nil {
				return fmt.Sprintf("spec.%s[%d] (%s): image %q is not a valid image reference: %v", list.field, i, c.Name, c.Image, err)
			}
		}
	}
	return ""
}
