package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"molt.dev/dev/testenv"
)

// TestServiceBinariesLinkNoDevTooling: what runs in a cluster (or ships to
// users) is apart from what only runs on a laptop. No service binary and
// not the kubectl molt plugin depends on a package of the dev module (the
// local control plane, the dev runtime, the test harness, the bench), and
// neither pkg/go.mod nor the plugin's go.mod requires it.
func TestServiceBinariesLinkNoDevTooling(t *testing.T) {
	env := testenv.Get(t)
	var binaries []string
	for _, svc := range serviceNames {
		binaries = append(binaries, "molt.dev/services/"+svc)
	}
	binaries = append(binaries, "molt.dev/kubectl-molt")
	for _, bin := range binaries {
		cmd := exec.Command("go", "list", "-deps", bin)
		cmd.Dir = env.RootDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", bin, err, out)
		}
		for _, pkg := range strings.Fields(string(out)) {
			if pkg == "molt.dev/dev" || strings.HasPrefix(pkg, "molt.dev/dev/") {
				t.Errorf("%s links %s, a dev-stack package", bin, pkg)
			}
		}
	}
	for _, mod := range []string{"pkg", filepath.Join("cmd", "kubectl-molt")} {
		cmd := exec.Command("go", "mod", "edit", "-json")
		cmd.Dir = filepath.Join(env.RootDir, mod)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go mod edit -json in %s: %v\n%s", mod, err, out)
		}
		if strings.Contains(string(out), `"molt.dev/dev"`) {
			t.Errorf("%s/go.mod requires molt.dev/dev:\n%s", mod, out)
		}
	}
}
