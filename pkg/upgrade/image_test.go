package upgrade

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestImageProblem(t *testing.T) {
	for _, tc := range []struct {
		image, want string
	}{
		{"nginx", ""},
		{"registry.example/sandbox:v2", ""},
		{"localhost:5000/team/sandbox:v2", ""},
		{"mirrors-ssl.aliyuncs.com/centos:7", ""},
		{"registry.example/sandbox@sha256:" + strings.Repeat("a", 64), ""},
		{"", ""}, // the API server's to refuse, naming the field
		{"My-Registry/Sandbox:V2", "must be lowercase"},
		{"registry.example/sandbox::v2", "invalid reference format"},
		{"registry.example/sandbox:v 2", "invalid reference format"},
	} {
		spec := &corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers:     []corev1.Container{{Name: "main", Image: "nginx"}, {Name: "sandbox", Image: tc.image}},
		}
		got := ImageProblem(spec)
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%q: ImageProblem = %q, want none", tc.image, got)
		case tc.want != "" && (!strings.Contains(got, tc.want) || !strings.Contains(got, "spec.containers[1] (sandbox)")):
			t.Errorf("%q: ImageProblem = %q, want it to name spec.containers[1] (sandbox) and say %q", tc.image, got, tc.want)
		}
	}
	init := &corev1.PodSpec{InitContainers: []corev1.Container{{Name: "init", Image: "Busybox"}}}
	if got := ImageProblem(init); !strings.Contains(got, "spec.initContainers[0] (init)") {
		t.Errorf("init container: ImageProblem = %q", got)
	}
}
