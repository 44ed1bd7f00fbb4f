package v1alpha1_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"molt.dev/pkg/upgrade"
)

// The tests in this file apply objects to deploy/crds through the API
// server emulation in apiserver_test.go: the user guides' YAML, the
// refusals API.md asks for (each with its field path), defaults, and the
// fields that are immutable after create.

// seedsWithoutSelector are the guides' SandboxUpdateOps that have no
// spec.selector. They are fragments of a full object (issue 7): the API
// server refuses them as upstream does, with "spec.selector is required".
var seedsWithoutSelector = map[string]bool{
	"000_03_sandboxupdateops_patch-demo.yaml":           true,
	"000_04_sandboxupdateops_upgrade-sidecar.yaml":      true,
	"000_05_sandboxupdateops_upgrade-with-paused.yaml":  true,
	"000_07_sandboxupdateops_rollback-sandboxes.yaml":   true,
	"000_08_sandboxupdateops_upgrade-my-sandboxes.yaml": true,
	"001_02_sandboxupdateops_noname.yaml":               true,
}

// TestSeedsAreAccepted applies every YAML of the user guides
// (testdata/seeds, copied verbatim from shared/seeds) as a create. Two of
// them are excerpts without metadata.name, which kubectl cannot apply as
// they stand; for those the test checks that every field they use exists
// and that their values are valid, not that a required spec is present.
// The ops without a selector are refused for that alone.
func TestSeedsAreAccepted(t *testing.T) {
	crds := loadCRDs(t)
	paths, err := filepath.Glob("testdata/seeds/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no seeds in testdata/seeds (%v)", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			obj := readYAML(t, path)
			kind, _ := obj["kind"].(string)
			crd := crds[kind]
			if crd == nil {
				t.Fatalf("no CRD for kind %q", kind)
			}
			meta, _ := obj["metadata"].(map[string]any)
			excerpt := meta["name"] == nil

			// Fields under status are checked too, before create drops them.
			if a := crd.decode(obj); len(a.unknown) > 0 {
				t.Errorf("unknown fields: %v", a.unknown)
			}
			_, errs := crd.create(obj)
			if seedsWithoutSelector[filepath.Base(path)] {
				if len(errs) != 1 || errs[0].Error() != "spec.selector: Required value: spec.selector is required" {
					t.Errorf("errors %v, want only spec.selector: Required value: spec.selector is required", errs)
				}
				return
			}
			for _, err := range errs {
				if excerpt && err.Type == field.ErrorTypeRequired && err.Field == "spec" {
					continue
				}
				t.Errorf("refused: %v", err)
			}
		})
	}
}

// TestSeedsDecodeIntoGoTypes decodes every seed strictly into the Go types,
// so that the typed clients know every field the guides use.
func TestSeedsDecodeIntoGoTypes(t *testing.T) {
	paths, err := filepath.Glob("testdata/seeds/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no seeds in testdata/seeds (%v)", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			obj := readYAML(t, path)
			target, err := newObject(obj["kind"].(string))
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.UnmarshalStrict(data, target); err != nil {
				t.Errorf("strict decode: %v", err)
			}
		})
	}
}

// baseOps is a valid ops; the table tests below change one field of it.
const baseOps = `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata:
  name: ops
  namespace: default
spec:
  selector:
    matchLabels:
      agents.kruise.io/sandbox-template: pool
  updateStrategy:
    maxUnavailable: 2
  patch:
    spec:
      containers:
        - name: sandbox
          image: registry/sandbox:v2
      volumes:
        - name: legacy
          $patch: delete
  lifecycle:
    preUpgrade:
      exec:
        command: [/bin/sh, -c, backup]
      timeoutSeconds: 120
`

// TestSandboxUpdateOpsCreateValidation covers the refusals API.md asks for
// at apply time, each with the field path in the error.
func TestSandboxUpdateOpsCreateValidation(t *testing.T) {
	crd := loadCRDs(t)["SandboxUpdateOps"]
	tests := []struct {
		name    string
		path    string
		value   any
		wantErr string // substring of the error; "" means accepted
	}{
		{name: "valid as written", path: "spec.paused", value: false},
		{name: "maxUnavailable integer", path: "spec.updateStrategy.maxUnavailable", value: int64(0)},
		{name: "maxUnavailable percent", path: "spec.updateStrategy.maxUnavailable", value: "10%"},
		{name: "maxUnavailable 0%", path: "spec.updateStrategy.maxUnavailable", value: "0%"},
		{name: "maxUnavailable 100%", path: "spec.updateStrategy.maxUnavailable", value: "100%"},
		// 150% is most likely a typo of 15%; as a Deployment's, it is refused rather than read as all at once.
		{name: "maxUnavailable over 100%", path: "spec.updateStrategy.maxUnavailable", value: "150%",
			wantErr: `spec.updateStrategy.maxUnavailable: Invalid value: "150%": maxUnavailable must be a non-negative integer or a percentage like "10%" (0% to 100%)`},
		{name: "maxUnavailable negative", path: "spec.updateStrategy.maxUnavailable", value: int64(-1),
			wantErr: `spec.updateStrategy.maxUnavailable: Invalid value: -1: maxUnavailable must be a non-negative integer or a percentage like "10%"`},
		{name: "maxUnavailable word", path: "spec.updateStrategy.maxUnavailable", value: "two",
			wantErr: `spec.updateStrategy.maxUnavailable: Invalid value: "two": maxUnavailable must be a non-negative integer or a percentage like "10%"`},
		{name: "maxUnavailable quoted integer", path: "spec.updateStrategy.maxUnavailable", value: "2",
			wantErr: `spec.updateStrategy.maxUnavailable: Invalid value: "2": maxUnavailable must be a non-negative integer or a percentage like "10%" (0% to 100%); write a count without quotes (1, not "1")`},
		{name: "maxUnavailable fraction percent", path: "spec.updateStrategy.maxUnavailable", value: "1.5%",
			wantErr: `spec.updateStrategy.maxUnavailable: Invalid value`},
		{name: "strategy type unknown", path: "spec.updateStrategy.type", value: "InPlace",
			wantErr: `spec.updateStrategy.type: Unsupported value: "InPlace"`},
		{name: "strategy CheckpointRestore with an image", path: "spec.updateStrategy.type", value: "CheckpointRestore",
			wantErr: checkpointImageErr},
		{name: "hook without exec", path: "spec.lifecycle.preUpgrade.exec", value: nil,
			wantErr: `spec.lifecycle.preUpgrade.exec: Required value`},
		{name: "postUpgrade hook without exec", path: "spec.lifecycle.postUpgrade", value: map[string]any{"timeoutSeconds": int64(5)},
			wantErr: `spec.lifecycle.postUpgrade.exec: Required value`},
		{name: "hook with empty command", path: "spec.lifecycle.preUpgrade.exec.command", value: []any{},
			wantErr: `spec.lifecycle.preUpgrade.exec.command: Invalid value: 0: spec.lifecycle.preUpgrade.exec.command in body should have at least 1 items`},
		{name: "hook timeout zero", path: "spec.lifecycle.preUpgrade.timeoutSeconds", value: int64(0),
			wantErr: `spec.lifecycle.preUpgrade.timeoutSeconds: Invalid value: 0`},
		{name: "hook timeout past a day (a typo)", path: "spec.lifecycle.preUpgrade.timeoutSeconds", value: int64(99999999),
			wantErr: `spec.lifecycle.preUpgrade.timeoutSeconds: Invalid value: 99999999: spec.lifecycle.preUpgrade.timeoutSeconds in body should be less than or equal to 86400`},
		{name: "state filter Paused", path: "spec.stateFilter.states", value: []any{"Paused"}},
		{name: "state filter Running and Paused", path: "spec.stateFilter.states", value: []any{"Running", "Paused"}},
		{name: "state filter other phase", path: "spec.stateFilter.states", value: []any{"Upgrading"},
			wantErr: `spec.stateFilter.states[0]: Unsupported value: "Upgrading"`},
		{name: "state filter duplicate", path: "spec.stateFilter.states", value: []any{"Running", "Running"},
			wantErr: `spec.stateFilter.states[1]: Duplicate value: "Running"`},
		{name: "no selector", path: "spec.selector", value: nil,
			wantErr: `spec.selector: Required value: spec.selector is required`},
		{name: "selector {} selects everything", path: "spec.selector", value: map[string]any{}},
		{name: "selector bad operator", path: "spec.selector",
			value:   map[string]any{"matchExpressions": []any{map[string]any{"key": "a", "operator": "Equals", "values": []any{"b"}}}},
			wantErr: `spec.selector: Invalid value: matchExpressions operator must be one of In, NotIn, Exists, DoesNotExist`},
		{name: "selector In without values", path: "spec.selector",
			value:   map[string]any{"matchExpressions": []any{map[string]any{"key": "a", "operator": "In"}}},
			wantErr: `spec.selector: Invalid value: matchExpressions values must be non-empty for In and NotIn`},
		{name: "selector Exists", path: "spec.selector",
			value: map[string]any{"matchExpressions": []any{map[string]any{"key": "a", "operator": "Exists"}}}},
		{name: "selector without key", path: "spec.selector",
			value:   map[string]any{"matchExpressions": []any{map[string]any{"operator": "Exists"}}},
			wantErr: `spec.selector.matchExpressions[0].key: Required value`},
		{name: "patch not an object", path: "spec.patch", value: "image: v2",
			wantErr: `spec.patch: Invalid value: "string": spec.patch in body must be of type object`},
		{name: "unknown spec field", path: "spec.maxUnavailable", value: int64(1),
			wantErr: `spec.maxUnavailable: Unsupported value`},
		// The name is the update-ops label's value on every claimed sandbox.
		{name: "name of 63 characters", path: "metadata.name", value: strings.Repeat("a", 63)},
		{name: "name of 64 characters", path: "metadata.name", value: strings.Repeat("a", 64),
			wantErr: `metadata.name: Invalid value: metadata.name must be at most 63 characters: molt writes it as the value of the agents.kruise.io/update-ops label`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := parseYAML(t, baseOps)
			setPath(obj, tt.path, tt.value)
			_, errs := crd.create(obj)
			checkErrors(t, errs, tt.wantErr)
		})
	}
}

// checkpointImageErr is the refusal of a CheckpointRestore ops whose patch
// sets an image.
const checkpointImageErr = `spec.patch: Invalid value: a CheckpointRestore upgrade cannot change a container or initContainer image; use updateStrategy.type Recreate`

// TestCheckpointRestoreImageRule: a CheckpointRestore ops whose patch sets
// a container or initContainer image is refused at apply time, in step
// with upgrade.SetsImage (which the patcher uses); the patch is stored
// unchanged.
func TestCheckpointRestoreImageRule(t *testing.T) {
	crd := loadCRDs(t)["SandboxUpdateOps"]
	tests := []struct {
		name     string
		strategy string // spec.updateStrategy.type; "" leaves the default
		patch    string
		refused  bool
	}{
		{name: "image in containers", strategy: "CheckpointRestore",
			patch: `{spec: {containers: [{name: sandbox, image: "registry/sandbox:v2"}]}}`, refused: true},
		{name: "image in initContainers", strategy: "CheckpointRestore",
			patch: `{spec: {initContainers: [{name: init, image: "registry/init:v2"}]}}`, refused: true},
		{name: "image in the second container", strategy: "CheckpointRestore",
			patch: `{spec: {containers: [{name: a, env: [{name: A, value: "1"}]}, {name: b, image: "registry/b:v2"}]}}`, refused: true},
		{name: "env only", strategy: "CheckpointRestore",
			patch: `{spec: {containers: [{name: sandbox, env: [{name: LOG_LEVEL, value: debug}]}]}}`},
		{name: "annotation only (seed 000-04)", strategy: "CheckpointRestore",
			patch: `{metadata: {annotations: {agents.kruise.io/upgrade-sidecar: "20260714"}}}`},
		{name: "directives and nulls", strategy: "CheckpointRestore",
			patch: `{spec: {containers: null, initContainers: [{name: old, $patch: delete}], volumes: [{name: legacy, $patch: delete}]}}`},
		{name: "no patch", strategy: "CheckpointRestore"},
		{name: "Recreate with an image", strategy: "Recreate",
			patch: `{spec: {containers: [{name: sandbox, image: "registry/sandbox:v2"}], initContainers: [{name: init, image: "registry/init:v2"}]}}`},
		{name: "default strategy with an image",
			patch: `{spec: {containers: [{name: sandbox, image: "registry/sandbox:v2"}]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := parseYAML(t, "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxUpdateOps\nmetadata: {name: ops, namespace: default}\nspec: {selector: {}}\n")
			if tt.strategy != "" {
				setPath(obj, "spec.updateStrategy.type", tt.strategy)
			}
			var patch map[string]any
			if tt.patch != "" {
				patch = parseYAML(t, tt.patch)
				setPath(obj, "spec.patch", patch)
			}
			stored, errs := crd.create(obj)
			want := ""
			if tt.refused {
				want = checkpointImageErr
			}
			checkErrors(t, errs, want)
			if tt.refused || patch == nil {
				return
			}
			if got := stored["spec"].(map[string]any)["patch"]; !equality.Semantic.DeepEqual(got, patch) {
				t.Errorf("stored patch %v, want %v unchanged", got, patch)
			}
			if tt.strategy != "CheckpointRestore" {
				return
			}
			raw, err := json.Marshal(patch)
			if err != nil {
				t.Fatal(err)
			}
			if sets, err := upgrade.SetsImage(raw); err != nil || sets != tt.refused {
				t.Errorf("upgrade.SetsImage(%s) = %v, %v; the CRD rule says %v", raw, sets, err, tt.refused)
			}
		})
	}
}

// TestSandboxUpdateOpsDefaults checks what the API server fills in, and
// that an empty selector is kept as {} (it is not defaulted: an ops without
// one is refused).
func TestSandboxUpdateOpsDefaults(t *testing.T) {
	crd := loadCRDs(t)["SandboxUpdateOps"]
	obj := parseYAML(t, `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata: {name: ops, namespace: default}
spec:
  selector: {}
  lifecycle:
    postUpgrade:
      exec: {command: [restore]}
`)
	stored, errs := crd.create(obj)
	if len(errs) > 0 {
		t.Fatalf("refused: %v", errs.ToAggregate())
	}
	spec := stored["spec"].(map[string]any)
	if got, ok := spec["selector"].(map[string]any); !ok || len(got) != 0 {
		t.Errorf("selector = %#v, want {}", spec["selector"])
	}
	if got := spec["updateStrategy"].(map[string]any)["type"]; got != "Recreate" {
		t.Errorf("updateStrategy.type = %v, want Recreate", got)
	}
	hook := spec["lifecycle"].(map[string]any)["postUpgrade"].(map[string]any)
	if got := hook["timeoutSeconds"]; got != int64(60) {
		t.Errorf("postUpgrade.timeoutSeconds = %#v, want 60", got)
	}
}

// TestSandboxUpdateOpsImmutableFields updates a stored ops: selector, patch
// and lifecycle are fixed, paused, updateStrategy and stateFilter are not.
func TestSandboxUpdateOpsImmutableFields(t *testing.T) {
	crd := loadCRDs(t)["SandboxUpdateOps"]
	old, errs := crd.create(parseYAML(t, baseOps))
	if len(errs) > 0 {
		t.Fatalf("create refused: %v", errs.ToAggregate())
	}
	old["status"] = map[string]any{"phase": "Updating", "replicas": int64(3), "updatedReplicas": int64(0),
		"updatingReplicas": int64(2), "failedReplicas": int64(0)}

	tests := []struct {
		name    string
		path    string
		value   any
		wantErr string
	}{
		{name: "same object again", path: "spec.paused", value: nil},
		{name: "pause", path: "spec.paused", value: true},
		{name: "change maxUnavailable", path: "spec.updateStrategy.maxUnavailable", value: "50%"},
		{name: "change strategy type to CheckpointRestore under an image patch", path: "spec.updateStrategy.type", value: "CheckpointRestore",
			wantErr: checkpointImageErr},
		{name: "change state filter", path: "spec.stateFilter.states", value: []any{"Paused"}},
		{name: "change selector", path: "spec.selector.matchLabels", value: map[string]any{"app": "other"},
			wantErr: `spec.selector: Invalid value: selector is immutable`},
		{name: "drop selector", path: "spec.selector", value: nil,
			wantErr: `spec.selector: Invalid value: selector is immutable`},
		{name: "change patch image", path: "spec.patch.spec.containers",
			value:   []any{map[string]any{"name": "sandbox", "image": "registry/sandbox:v3"}},
			wantErr: `spec.patch: Invalid value: patch is immutable`},
		{name: "drop patch directive", path: "spec.patch.spec.volumes", value: nil,
			wantErr: `spec.patch: Invalid value: patch is immutable`},
		{name: "drop patch", path: "spec.patch", value: nil,
			wantErr: `spec.patch: Invalid value: patch is immutable`},
		{name: "change hook timeout", path: "spec.lifecycle.preUpgrade.timeoutSeconds", value: int64(30),
			wantErr: `spec.lifecycle: Invalid value: lifecycle is immutable`},
		{name: "add postUpgrade", path: "spec.lifecycle.postUpgrade", value: map[string]any{"exec": map[string]any{"command": []any{"restore"}}},
			wantErr: `spec.lifecycle: Invalid value: lifecycle is immutable`},
		{name: "drop lifecycle", path: "spec.lifecycle", value: nil,
			wantErr: `spec.lifecycle: Invalid value: lifecycle is immutable`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := parseYAML(t, baseOps)
			setPath(obj, tt.path, tt.value)
			checkErrors(t, crd.update(old, obj), tt.wantErr)
		})
	}
}

// TestSandboxSetMaxUnavailable checks the SandboxSet's int-or-percent rules.
func TestSandboxSetMaxUnavailable(t *testing.T) {
	crd := loadCRDs(t)["SandboxSet"]
	const set = `
apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: {name: pool, namespace: default}
spec:
  replicas: 3
  runtimes: [{name: agent-runtime}]
  template:
    metadata: {labels: {app: sandbox}}
    spec:
      containers: [{name: sandbox, image: registry/sandbox:v1}]
`
	tests := []struct {
		name    string
		path    string
		value   any
		wantErr string
	}{
		{name: "update percent", path: "spec.updateStrategy.maxUnavailable", value: "20%"},
		{name: "scale integer", path: "spec.scaleStrategy.maxUnavailable", value: int64(5)},
		{name: "update over 100%", path: "spec.updateStrategy.maxUnavailable", value: "101%",
			wantErr: `spec.updateStrategy.maxUnavailable: Invalid value: "101%": maxUnavailable must be a non-negative integer or a percentage like "10%" (0% to 100%)`},
		{name: "scale over 100%", path: "spec.scaleStrategy.maxUnavailable", value: "200%",
			wantErr: `spec.scaleStrategy.maxUnavailable: Invalid value: "200%": maxUnavailable must be a non-negative integer or a percentage`},
		{name: "update word", path: "spec.updateStrategy.maxUnavailable", value: "all",
			wantErr: `spec.updateStrategy.maxUnavailable: Invalid value: "all": maxUnavailable must be a non-negative integer or a percentage`},
		{name: "scale negative", path: "spec.scaleStrategy.maxUnavailable", value: int64(-2),
			wantErr: `spec.scaleStrategy.maxUnavailable: Invalid value: -2: maxUnavailable must be a non-negative integer or a percentage`},
		{name: "negative replicas", path: "spec.replicas", value: int64(-1),
			wantErr: `spec.replicas: Invalid value: -1`},
		{name: "template not an object", path: "spec.template", value: "pod",
			wantErr: `spec.template: Invalid value: "string": spec.template in body must be of type object`},
		{name: "name of 64 characters", path: "metadata.name", value: strings.Repeat("p", 64),
			wantErr: `metadata.name: Invalid value: metadata.name must be at most 63 characters: it is the value of the agents.kruise.io/sandbox-pool`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := parseYAML(t, set)
			setPath(obj, tt.path, tt.value)
			stored, errs := crd.create(obj)
			checkErrors(t, errs, tt.wantErr)
			if tt.wantErr == "" {
				// The schemaless template is kept whole, not pruned.
				tmpl := stored["spec"].(map[string]any)["template"].(map[string]any)
				if _, ok := tmpl["spec"].(map[string]any)["containers"]; !ok {
					t.Errorf("template pruned: %#v", tmpl)
				}
			}
		})
	}
}

// TestSandboxAndCheckpointFields creates a Sandbox and a Checkpoint with
// every field API.md names.
func TestSandboxAndCheckpointFields(t *testing.T) {
	crds := loadCRDs(t)
	sandbox := parseYAML(t, `
apiVersion: agents.kruise.io/v1alpha1
kind: Sandbox
metadata:
  name: sbx
  namespace: default
  labels: {agents.kruise.io/sandbox-claimed: "true"}
spec:
  paused: false
  runtimes: [{name: agent-runtime}, {name: csi}]
  persistentContents: [filesystem]
  upgradePolicy: {type: CheckpointRestore}
  lifecycle:
    preUpgrade: {exec: {command: [backup]}, timeoutSeconds: 600}
    postUpgrade: {exec: {command: [restore]}}
  template:
    metadata: {labels: {app: sandbox}}
    spec:
      containers: [{name: sandbox, image: registry/sandbox:v1, env: [{name: A, value: b}]}]
      volumes: [{name: data, emptyDir: {}}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
`)
	if _, errs := crds["Sandbox"].create(sandbox); len(errs) > 0 {
		t.Errorf("sandbox refused: %v", errs.ToAggregate())
	}
	setPath(sandbox, "spec.upgradePolicy.type", "Rolling")
	if _, errs := crds["Sandbox"].create(sandbox); len(errs) == 0 {
		t.Errorf("sandbox with upgradePolicy.type Rolling accepted")
	}

	// Status as statusagg writes it, through the status subresource.
	stored, _ := crds["Sandbox"].create(parseYAML(t, `
apiVersion: agents.kruise.io/v1alpha1
kind: Sandbox
metadata: {name: sbx, namespace: default}
spec: {paused: false}
`))
	stored["status"] = parseYAML(t, `
observedGeneration: 2
phase: Upgrading
updateRevision: 5d8f7c
podInfo: {podIP: 10.0.0.5, nodeName: node-a, podUID: 3f1c}
sandboxIp: 10.0.0.5
nodeName: node-a
message: sandbox is upgrading
conditions:
  - {type: Ready, status: "False", reason: Upgrading, message: sandbox is upgrading, lastTransitionTime: "2026-05-01T08:27:51Z"}
  - {type: Upgrading, status: "False", reason: UpgradePod, message: "", lastTransitionTime: "2026-05-01T08:27:51Z"}
`)
	a := crds["Sandbox"].decode(stored)
	if len(a.unknown) > 0 {
		t.Errorf("status has unknown fields: %v", a.unknown)
	}
	if errs := apiservervalidation.ValidateCustomResource(nil, a.obj, crds["Sandbox"].schema); len(errs) > 0 {
		t.Errorf("status refused: %v", errs.ToAggregate())
	}

	checkpoint := parseYAML(t, `
apiVersion: agents.kruise.io/v1alpha1
kind: Checkpoint
metadata: {name: cp, namespace: default}
spec:
  sandboxName: sbx
  podName: sbx-pod
  keepRunning: true
  persistentContents: [filesystem]
  ttlAfterFinished: 30m
`)
	if _, errs := crds["Checkpoint"].create(checkpoint); len(errs) > 0 {
		t.Errorf("checkpoint refused: %v", errs.ToAggregate())
	}
}
