package devcluster_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"molt.dev/dev/testenv"
)

const opsHeader = `apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata:
  name: bad
spec:
`

// TestAPIServerRefusesBadOps applies invalid objects with kubectl and checks
// that the API server refuses each, naming the field path.
func TestAPIServerRefusesBadOps(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	cases := []struct {
		name, spec, wantPath string
	}{
		{"maxUnavailable not int or percent", "  selector: {}\n  updateStrategy:\n    maxUnavailable: \"abc\"\n", "spec.updateStrategy.maxUnavailable"},
		{"unknown state", "  selector: {}\n  stateFilter:\n    states: [Foo]\n", "spec.stateFilter.states[0]"},
		{"hook without exec", "  selector: {}\n  lifecycle:\n    preUpgrade:\n      timeoutSeconds: 10\n", "spec.lifecycle.preUpgrade.exec"},
		{"no selector", "  paused: true\n", "spec.selector: Required value: spec.selector is required"},
		{"CheckpointRestore changes an image", "  selector: {}\n  updateStrategy: {type: CheckpointRestore}\n  patch:\n    spec:\n      initContainers: [{name: init, image: registry/init:v2}]\n",
			"spec.patch: Invalid value: a CheckpointRestore upgrade cannot change a container or initContainer image; use updateStrategy.type Recreate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := kubectl(t, env, opsHeader+tc.spec, "apply", "-n", ns, "-f", "-")
			if err == nil {
				t.Fatalf("kubectl apply succeeded, want refusal:\n%s", out)
			}
			if !strings.Contains(out, tc.wantPath) {
				t.Fatalf("refusal does not name %s:\n%s", tc.wantPath, out)
			}
		})
	}
}

func TestOpsSelectorIsImmutable(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ops := opsHeader + "  selector:\n    matchLabels:\n      app: a\n"
	if out, err := kubectl(t, env, ops, "apply", "-n", ns, "-f", "-"); err != nil {
		t.Fatalf("create ops: %v\n%s", err, out)
	}
	out, err := kubectl(t, env, strings.Replace(ops, "app: a", "app: b", 1), "apply", "-n", ns, "-f", "-")
	if err == nil {
		t.Fatalf("changing spec.selector was accepted:\n%s", out)
	}
	if !strings.Contains(out, "spec.selector") && !strings.Contains(out, "selector is immutable") {
		t.Fatalf("refusal does not name spec.selector:\n%s", out)
	}
	// Mutable fields may change.
	if out, err := kubectl(t, env, ops+"  paused: true\n", "apply", "-n", ns, "-f", "-"); err != nil {
		t.Fatalf("changing spec.paused was refused: %v\n%s", err, out)
	}
}

// seedsWithoutSelector are the guides' named SandboxUpdateOps that have no
// spec.selector: fragments of a full object (issue 7), refused as upstream
// does.
var seedsWithoutSelector = map[string]bool{
	"000-03-sandboxupdateops-patch-demo.yaml":           true,
	"000-04-sandboxupdateops-upgrade-sidecar.yaml":      true,
	"000-05-sandboxupdateops-upgrade-with-paused.yaml":  true,
	"000-07-sandboxupdateops-rollback-sandboxes.yaml":   true,
	"000-08-sandboxupdateops-upgrade-my-sandboxes.yaml": true,
}

// TestSeedManifestsApplyVerbatim applies every named manifest of the user
// guides unchanged (as a fresh create): those with a selector are
// accepted, those without are refused with "spec.selector is required".
func TestSeedManifestsApplyVerbatim(t *testing.T) {
	env := testenv.Get(t)
	files, err := filepath.Glob(filepath.Join(env.RootDir, "test", "seeds", "manifests", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed manifests under test/seeds/manifests: %v", err)
	}
	accepted, refused := 0, 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "\n  name:") && !strings.Contains(string(data), "name: ") {
			continue
		}
		if strings.Contains(filepath.Base(f), "noname") {
			// Excerpts without metadata.name (a status printout, a patch
			// snippet); their fields are checked by the unit tests of
			// pkg/apis/agents/v1alpha1.
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			// The guides name namespace "default"; a server-side dry run
			// runs every admission and validation step without storing.
			out, err := kubectl(t, env, string(data), "apply", "--dry-run=server", "-f", "-")
			if !seedsWithoutSelector[filepath.Base(f)] {
				if err != nil {
					t.Fatalf("kubectl apply %s: %v\n%s", f, err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("kubectl apply %s succeeded, want refusal for the missing selector:\n%s", f, out)
			}
			if !strings.Contains(out, "spec.selector: Required value: spec.selector is required") {
				t.Fatalf("refusal of %s does not say spec.selector is required:\n%s", f, out)
			}
		})
		if seedsWithoutSelector[filepath.Base(f)] {
			refused++
		} else {
			accepted++
		}
	}
	if accepted < 5 || refused != len(seedsWithoutSelector) {
		t.Fatalf("%d seed manifests accepted and %d refused; expected every named one (%d without a selector)", accepted, refused, len(seedsWithoutSelector))
	}
}

func TestPrinterColumns(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	if out, err := kubectl(t, env, opsHeader+"  selector: {}\n", "apply", "-n", ns, "-f", "-"); err != nil {
		t.Fatalf("create ops: %v\n%s", err, out)
	}
	cases := []struct {
		resource string
		columns  []string
	}{
		{"suo", []string{"NAME", "PHASE", "TOTAL", "UPDATED", "UPDATING", "FAILED", "AGE"}},
	}
	for _, tc := range cases {
		out, err := kubectl(t, env, "", "get", tc.resource, "-n", ns)
		if err != nil {
			t.Fatalf("kubectl get %s: %v\n%s", tc.resource, err, out)
		}
		header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
		if strings.Join(header, " ") != strings.Join(tc.columns, " ") {
			t.Fatalf("kubectl get %s columns = %v, want %v", tc.resource, header, tc.columns)
		}
	}
	// -o wide adds whether the ops is paused and its Progressing reason.
	if out, err := kubectl(t, env, "", "get", "suo", "-n", ns, "-o", "wide"); err != nil || strings.Join(strings.Fields(strings.SplitN(out, "\n", 2)[0]), " ") != "NAME PHASE TOTAL UPDATED UPDATING FAILED AGE PAUSED REASON" {
		t.Fatalf("kubectl get suo -o wide: %v\n%s", err, out)
	}
	for _, r := range []string{"sbx", "sbs", "cp", "sandboxupdateops", "sandboxes", "sandboxsets", "checkpoints"} {
		if out, err := kubectl(t, env, "", "get", r, "-n", ns); err != nil {
			t.Fatalf("kubectl get %s: %v\n%s", r, err, out)
		}
	}
	out, err := kubectl(t, env, "", "explain", "sandboxupdateops.spec.updateStrategy")
	if err != nil || !strings.Contains(out, "maxUnavailable") || !strings.Contains(out, "type") {
		t.Fatalf("kubectl explain: %v\n%s", err, out)
	}
}
