package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"molt.dev/dev/testenv"
)

// TestServiceBinariesLinkNoDevTooling: what runs in a cluster is apart from
// what only runs on a laptop. No service binary depends on a package of the
// dev module (the local control plane, the dev runtime, the test harness,
// the bench), and pkg/go.mod does not require it.
func TestServiceBinariesLinkNoDevTooling(t *testing.T) {
	env := testenv.Get(t)
	for _, svc := range serviceNames {
		cmd := exec.Command("go", "list", "-deps", "molt.dev/services/"+svc)
		cmd.Dir = env.RootDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps molt.dev/services/%s: %v\n%s", svc, err, out)
		}
		for _, pkg := range strings.Fields(string(out)) {
			if pkg == "molt.dev/dev" || strings.HasPrefix(pkg, "molt.dev/dev/") {
				t.Errorf("service %s links %s, a dev-stack package", svc, pkg)
			}
		}
	}
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = filepath.Join(env.RootDir, "pkg")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go mod edit -json in pkg: %v\n%s", err, out)
	}
	if strings.Contains(string(out), `"molt.dev/dev"`) {
		t.Errorf("pkg/go.mod requires molt.dev/dev:\n%s", out)
	}
}
