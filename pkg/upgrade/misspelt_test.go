package upgrade

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A container the patch adds with only an image, under a name a letter or
// two from one the template has, reads as a misspelling; a new container
// with a name of its own, one that says more than its image, an existing
// one, and a $patch directive do not.
func TestMisspeltContainers(t *testing.T) {
	tpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers:     []corev1.Container{{Name: "sandbox"}, {Name: "agent-runtime"}},
		InitContainers: []corev1.Container{{Name: "init"}},
	}}
	for _, tc := range []struct {
		name, patch string
		want        []string
	}{
		{"a letter dropped", `{"spec":{"containers":[{"name":"sandbx","image":"v2"}]}}`, []string{"containers/sandbx (1 edit from containers/sandbox)"}},
		{"two letters swapped", `{"spec":{"containers":[{"name":"sadnbox","image":"v2"}]}}`, []string{"containers/sadnbox (2 edits from containers/sandbox)"}},
		{"an init container", `{"spec":{"initContainers":[{"name":"inits","image":"v2"}]}}`, []string{"initContainers/inits (1 edit from initContainers/init)"}},
		{"the right name", `{"spec":{"containers":[{"name":"sandbox","image":"v2"}]}}`, nil},
		{"a sidecar of its own name", `{"spec":{"containers":[{"name":"log-shipper","image":"v1"}]}}`, nil},
		{"a new container that says more than its image", `{"spec":{"containers":[{"name":"sandbox2","image":"v1","args":["--serve"]}]}}`, nil},
		{"a delete directive", `{"spec":{"containers":[{"name":"sandbx","$patch":"delete"}]}}`, nil},
		{"no containers", `{"metadata":{"annotations":{"a":"b"}}}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MisspeltContainers(tpl, []byte(tc.patch)); !slices.Equal(got, tc.want) {
				t.Errorf("MisspeltContainers = %q, want %q", got, tc.want)
			}
		})
	}
}
