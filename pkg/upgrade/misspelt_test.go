package upgrade

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A container the patch adds with only a new tag of a template container's
// image, under a name a letter or two from that container's, reads as a
// misspelling; a new container with a name of its own or another image, a
// numbered sibling, one beside the container the patch updates, one with no
// image, and a $patch directive do not. One that says more than its image
// does too: a typo brings the fields meant for the real container along (a
// walk's `sandbx` with an env ended Completed, the real container unchanged).
func TestMisspeltContainers(t *testing.T) {
	tpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "sandbox", Image: "my-registry/sandbox-image:v1"}, {Name: "agent-runtime", Image: "my-registry/runtime:v1"},
			{Name: "app", Image: "example/app:v1"}, {Name: "worker-1", Image: "example/worker:v1"}},
		InitContainers: []corev1.Container{{Name: "init", Image: "example/init@sha256:abc"}},
	}}
	for _, tc := range []struct {
		name, patch string
		want        []string
	}{
		{"a letter dropped", `{"spec":{"containers":[{"name":"sandbx","image":"my-registry/sandbox-image:v2"}]}}`, []string{"containers/sandbx (1 edit from containers/sandbox)"}},
		{"two letters swapped", `{"spec":{"containers":[{"name":"sadnbox","image":"my-registry/sandbox-image:v2"}]}}`, []string{"containers/sadnbox (1 edit from containers/sandbox)"}},
		{"two edits", `{"spec":{"containers":[{"name":"sndbx","image":"my-registry/sandbox-image:v2"}]}}`, []string{"containers/sndbx (2 edits from containers/sandbox)"}},
		{"a short name swapped", `{"spec":{"containers":[{"name":"apq","image":"example/app:v2"}]}}`, []string{"containers/apq (1 edit from containers/app)"}},
		{"an init container", `{"spec":{"initContainers":[{"name":"inits","image":"example/init:v2"}]}}`, []string{"initContainers/inits (1 edit from initContainers/init)"}},
		{"the right name", `{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v2"}]}}`, nil},
		{"a sidecar of its own name", `{"spec":{"containers":[{"name":"log-shipper","image":"my-registry/sandbox-image:v1"}]}}`, nil},
		{"a near name of another image", `{"spec":{"containers":[{"name":"api","image":"example/api:v1"}]}}`, nil},
		{"a short name two edits off", `{"spec":{"containers":[{"name":"axe","image":"example/app:v2"}]}}`, nil},
		{"a numbered sibling", `{"spec":{"containers":[{"name":"worker-2","image":"example/worker:v2"}]}}`, nil},
		{"a second container beside the one patched", `{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v2"},{"name":"sandbx","image":"my-registry/sandbox-image:v2"}]}}`, nil},
		{"a misspelling that says more than its image", `{"spec":{"containers":[{"name":"sandbx","image":"my-registry/sandbox-image:v2","env":[{"name":"LOG_LEVEL","value":"debug"}]}]}}`, []string{"containers/sandbx (1 edit from containers/sandbox)"}},
		{"a misspelling with no image", `{"spec":{"containers":[{"name":"sandbx","env":[{"name":"LOG_LEVEL","value":"debug"}]}]}}`, nil},
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
