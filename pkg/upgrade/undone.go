package upgrade

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// PatchUndone says how tpl, a template edited since an ops's patch was applied to
// it, no longer carries that patch: the images it sets back or otherwise, or a
// field in general; "" when applying the patch again changes nothing (the edit
// left what the patch sets alone). A patch that no longer applies to tpl is
// undone too, with the error.
func PatchUndone(tpl *corev1.PodTemplateSpec, patch []byte) string {
	patched, err := ApplyPatch(tpl, patch)
	if err != nil {
		return fmt.Sprintf("the patch no longer applies to it: %v", err)
	}
	have, err := Revision(tpl)
	if err != nil {
		return fmt.Sprintf("its template cannot be hashed: %v", err)
	}
	want, err := Revision(patched)
	if err != nil {
		return fmt.Sprintf("the patched template cannot be hashed: %v", err)
	}
	if have == want {
		return ""
	}
	var images []string
	for _, kind := range []struct {
		name      string
		have, set []corev1.Container
	}{
		{"initContainer", tplContainers(tpl).InitContainers, patched.Spec.InitContainers},
		{"container", tplContainers(tpl).Containers, patched.Spec.Containers},
	} {
		for _, s := range kind.set {
			found := false
			for _, h := range kind.have {
				if h.Name != s.Name {
					continue
				}
				found = true
				if h.Image != s.Image {
					images = append(images, fmt.Sprintf("%s %s runs %s, the patch sets %s", kind.name, s.Name, h.Image, s.Image))
				}
			}
			if !found {
				images = append(images, fmt.Sprintf("%s %s, which the patch adds, is gone", kind.name, s.Name))
			}
		}
	}
	if len(images) > 0 {
		return strings.Join(images, "; ")
	}
	return "a field the patch sets has another value"
}

// tplContainers is tpl's pod spec, empty for a nil template.
func tplContainers(tpl *corev1.PodTemplateSpec) *corev1.PodSpec {
	if tpl == nil {
		return &corev1.PodSpec{}
	}
	return &tpl.Spec
}
