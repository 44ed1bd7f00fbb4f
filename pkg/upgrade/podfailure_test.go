package upgrade

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// An UpgradePodFailed whose container cannot pull the image the patch sets
// on it names that image: a retry, which keeps the patch, would fail the
// same way. Other failures, and images the patch does not set, name none.
func TestPatchImageNotPulled(t *testing.T) {
	patch := []byte(`{"spec":{"containers":[{"name":"gateway","image":"ghcr.io/openclaw/openclaw:non-existent"}],"initContainers":[{"name":"init","image":"busybox:bad"}]}}`)
	for _, tc := range []struct {
		msg             string
		container, want string
	}{
		{"container gateway: ErrImagePull - rpc error: ghcr.io/openclaw/openclaw:non-existent: not found", "gateway", "ghcr.io/openclaw/openclaw:non-existent"},
		{"container gateway: ImagePullBackOff - Back-off pulling image", "gateway", "ghcr.io/openclaw/openclaw:non-existent"},
		{"container init: InvalidImageName - bad", "init", "busybox:bad"},
		{"container gateway: CrashLoopBackOff - back-off restarting", "", ""},
		{"container sidecar: ErrImagePull - not found", "", ""},
		{"pod not Ready within 5m0s", "", ""},
	} {
		container, image, ok := PatchImageNotPulled(patch, tc.msg)
		if ok != (tc.want != "") || container != tc.container || image != tc.want {
			t.Errorf("PatchImageNotPulled(%q) = %q, %q, %v; want %q, %q", tc.msg, container, image, ok, tc.container, tc.want)
		}
	}
	hint := ImageNotPulledHint(patch, []string{"pod not Ready", "container gateway: ErrImagePull - not found"})
	for _, want := range []string{"ghcr.io/openclaw/openclaw:non-existent", "container gateway", "would fail the same way", "create a new SandboxUpdateOps with the image fixed"} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q lacks %q", hint, want)
		}
	}
	if hint := ImageNotPulledHint(patch, []string{"pod not Ready"}); hint != "" {
		t.Errorf("hint for no pull failure = %q, want none", hint)
	}
	// A postUpgrade-only ops (no patch) resuming an earlier ops's bad image: the
	// template keeps it, so the hint says to fix it in a patch.
	hint = ImageNotPulledHint(nil, []string{`container sandbox: ImagePullBackOff - Back-off pulling image "my-registry/non-existent:v2"`})
	for _, want := range []string{"container sandbox's image cannot be pulled", "this ops's patch does not change it", "patch sets a working image on container sandbox"} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint without an image patch %q lacks %q", hint, want)
		}
	}
}

// A failing container is named with its reason and message; a crash loop adds how the
// container last ended (its exit code is the cause; the back-off says nothing of it).
func TestContainerFailure(t *testing.T) {
	pod := func(cs corev1.ContainerStatus, init bool) *corev1.Pod {
		p := &corev1.Pod{}
		if init {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{cs}
		} else {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		}
		return p
	}
	waiting := func(reason, msg string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string // "" for no failure
	}{
		{"image pull", pod(corev1.ContainerStatus{Name: "sandbox", State: waiting("ImagePullBackOff", `Back-off pulling image "x:v2"`)}, false),
			`container sandbox: ImagePullBackOff - Back-off pulling image "x:v2"`},
		{"crash loop", pod(corev1.ContainerStatus{Name: "sandbox", State: waiting("CrashLoopBackOff", "back-off 10s restarting failed container=sandbox"),
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", Message: "config.yaml: no such file"}}}, false),
			"container sandbox: CrashLoopBackOff - back-off 10s restarting failed container=sandbox (last ended: exit code 2, Error: config.yaml: no such file)"},
		{"terminated", pod(corev1.ContainerStatus{Name: "sandbox", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}}, false),
			"container sandbox: Terminated - exit code 137"},
		{"init container done", pod(corev1.ContainerStatus{Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}, true), ""},
		{"creating", pod(corev1.ContainerStatus{Name: "sandbox", State: waiting("ContainerCreating", "")}, false), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, failed := ContainerFailure(tc.pod)
			if got != tc.want || failed != (tc.want != "") {
				t.Fatalf("ContainerFailure = %q, %t; want %q", got, failed, tc.want)
			}
		})
	}
}
