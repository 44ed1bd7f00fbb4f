package upgrade

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPatchUndone(t *testing.T) {
	template := func(image string, env ...corev1.EnvVar) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image, Env: env}}}}
	}
	patch := []byte(`{"spec":{"containers":[{"name":"main","image":"reg/agent:v2"}]}}`)
	for _, tc := range []struct {
		name string
		tpl  *corev1.PodTemplateSpec
		want string // a part of the answer; "" for none
	}{
		{"the patch still holds", template("reg/agent:v2"), ""},
		{"an edit beside the patch", template("reg/agent:v2", corev1.EnvVar{Name: "A", Value: "1"}), ""},
		{"the image set back", template("reg/agent:v1"), "container main is set to reg/agent:v1 in spec.template, the patch sets reg/agent:v2"},
		{"the image set to a third", template("reg/agent:v3"), "container main is set to reg/agent:v3"},
		{"pinned to its digest by a webhook", template("reg/agent:v2@sha256:0123abcd"), ""},
		{"pinned to a digest in place of its tag", template("reg/agent@sha256:0123abcd"), ""},
		{"the image set back, pinned", template("reg/agent:v1@sha256:0123abcd"), "container main is set to reg/agent:v1@sha256:0123abcd"},
		{"another repository's digest", template("reg/other@sha256:0123abcd"), "container main is set to reg/other@sha256:0123abcd"},
		{"the container renamed", &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "other", Image: "reg/agent:v2"}}}}, "container main, which the patch adds, is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PatchUndone(tc.tpl, patch)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("PatchUndone = %q, want %q", got, tc.want)
			}
		})
	}
	env := []byte(`{"spec":{"containers":[{"name":"main","env":[{"name":"A","value":"2"}]}]}}`)
	if got := PatchUndone(template("reg/agent:v1", corev1.EnvVar{Name: "A", Value: "1"}), env); got != "a field the patch sets has another value" {
		t.Errorf("an env the patch sets, edited: %q", got)
	}
	if got := PatchUndone(template("reg:5000/agent@sha256:0123abcd"), []byte(`{"spec":{"containers":[{"name":"main","image":"reg:5000/agent:v2"}]}}`)); got != "" {
		t.Errorf("a registry with a port, pinned: %q", got)
	}
	if got := PatchUndone(template("reg/agent:v1"), nil); got != "" {
		t.Errorf("an empty patch is never undone: %q", got)
	}
}
