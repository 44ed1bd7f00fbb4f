package upgrade

import (
	"strings"
	"testing"
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
}
