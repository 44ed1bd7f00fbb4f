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
	if pinnedOnly(tpl, patched) {
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
					images = append(images, fmt.Sprintf("%s %s is set to %s in spec.template, the patch sets %s", kind.name, s.Name, h.Image, s.Image))
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

// pinnedOnly reports whether tpl differs from patched, the patch applied to
// it again, only in images that tpl pins to a digest of the image the patch
// sets (repo:tag@sha256:…, or repo@sha256:…): what a mutating admission
// webhook does to the template the patcher wrote, not a user's edit undoing
// the patch.
func pinnedOnly(tpl, patched *corev1.PodTemplateSpec) bool {
	if tpl == nil || patched == nil {
		return false
	}
	unpinned := patched.DeepCopy()
	for _, kind := range []struct{ have, set []corev1.Container }{
		{tpl.Spec.InitContainers, unpinned.Spec.InitContainers},
		{tpl.Spec.Containers, unpinned.Spec.Containers},
	} {
		for i := range kind.set {
			for _, h := range kind.have {
				if h.Name == kind.set[i].Name && pinnedTo(h.Image, kind.set[i].Image) {
					kind.set[i].Image = h.Image
				}
			}
		}
	}
	have, err := Revision(tpl)
	if err != nil {
		return false
	}
	want, err := Revision(unpinned)
	return err == nil && have == want
}

// pinnedTo reports whether image is ref pinned to a digest: ref@sha256:…, or
// ref's repository @sha256:… (a webhook that replaces the tag).
func pinnedTo(image, ref string) bool {
	repo, digest, ok := strings.Cut(image, "@")
	if !ok || !strings.HasPrefix(digest, "sha256:") || strings.Contains(ref, "@") {
		return false
	}
	if repo == ref {
		return true
	}
	return repo == repository(ref)
}

// repository is ref without its tag: the part before a ':' that comes after
// the last '/' (a ':' before it is a registry's port).
func repository(ref string) string {
	slash := strings.LastIndex(ref, "/")
	if colon := strings.LastIndex(ref, ":"); colon > slash {
		return ref[:colon]
	}
	return ref
}
