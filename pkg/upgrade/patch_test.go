package upgrade

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// seedPatch reads the spec.patch of a seed manifest as JSON bytes.
func seedPatch(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "test", "seeds", "manifests", file))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Spec struct {
			Patch map[string]any `json:"patch"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.YAMLToJSON(mustYAML(t, doc.Spec.Patch))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestApplyPatch(t *testing.T) {
	base := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "test-container", Image: "mirrors-ssl.aliyuncs.com/centos:7",
			VolumeMounts: []corev1.VolumeMount{{Name: "volume1", MountPath: "/mnt/volume1"}, {Name: "volume2", MountPath: "/mnt/volume2"}},
		}},
		Volumes: []corev1.Volume{
			{Name: "volume1", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "volume2", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}}
	seed := base.DeepCopy()
	seed.Spec.Containers[0].Image = "mirrors-ssl.aliyuncs.com/centos:8"
	// Strategic merge puts items the patch adds before the kept ones, as
	// `kubectl patch --type strategic` does.
	seed.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "volume3", MountPath: "/mnt/volume3"}, {Name: "volume1", MountPath: "/mnt/volume1"}}
	seed.Spec.Volumes = []corev1.Volume{
		{Name: "volume3", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "volume1", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}

	cases := []struct {
		name    string
		patch   []byte
		want    *corev1.PodTemplateSpec
		wantErr bool
	}{
		{"seed 001: update image, add volume3, delete volume2", seedPatch(t, "001-02-sandboxupdateops-noname.yaml"), seed, false},
		{"empty patch", nil, base, false},
		{"containers null is dropped", []byte(`{"spec":{"containers":null}}`), base, false},
		{"not an object", []byte(`[1,2]`), nil, true},
		{"unknown field", []byte(`{"spec":{"bogus":1}}`), nil, true},
		// encoding/json alone would match these case-insensitively and keep the old value.
		{"a field name in the wrong case", []byte(`{"spec":{"containers":[{"name":"test-container","Image":"centos:8"}]}}`), nil, true},
		{"a list name in the wrong case", []byte(`{"spec":{"Containers":[{"name":"test-container","image":"centos:8"}]}}`), nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ApplyPatch(base, tc.patch)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ApplyPatch succeeded: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Fatalf("ApplyPatch =\n%s\nwant\n%s", mustYAML(t, got), mustYAML(t, tc.want))
			}
		})
	}
	if base.Spec.Containers[0].Image != "mirrors-ssl.aliyuncs.com/centos:7" {
		t.Fatal("ApplyPatch changed its input")
	}
}

func TestSetsImage(t *testing.T) {
	cases := []struct {
		name  string
		patch string
		want  bool
	}{
		{"image", `{"spec":{"containers":[{"name":"a","image":"x"}]}}`, true},
		{"init image", `{"spec":{"initContainers":[{"name":"a","image":"x"}]}}`, true},
		{"env only", `{"spec":{"containers":[{"name":"a","env":[{"name":"A","value":"1"}]}]}}`, false},
		{"metadata only", `{"metadata":{"annotations":{"a":"b"}}}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SetsImage([]byte(tc.patch))
			if err != nil || got != tc.want {
				t.Fatalf("SetsImage = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestDropNullContainers(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"null containers dropped", `{"spec":{"containers":null,"hostname":"h"}}`, `{"spec":{"hostname":"h"}}`},
		{"empty list kept", `{"spec":{"containers":[]}}`, `{"spec":{"containers":[]}}`},
		{"other nulls kept", `{"spec":{"nodeSelector":null}}`, `{"spec":{"nodeSelector":null}}`},
		{"no spec", `{"metadata":{"labels":{"a":"b"}}}`, `{"metadata":{"labels":{"a":"b"}}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dropNullContainers([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("dropNullContainers(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the current code")

// TestApplyPatchGolden pins what each seed's patch makes of one template
// (a sandbox container with a volume, a sidecar, the volume legacy-cache):
// the template a user would see after the patcher wrote it.
func TestApplyPatchGolden(t *testing.T) {
	base := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{
			{Name: "sandbox", Image: "my-registry/sandbox-image:v1", VolumeMounts: []corev1.VolumeMount{{Name: "legacy-cache", MountPath: "/cache"}}},
			{Name: "log-agent", Image: "my-registry/log-agent:v1"},
		},
		Volumes: []corev1.Volume{{Name: "legacy-cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}}
	for _, seed := range []string{
		"000-01-sandboxupdateops-upgrade-my-sandboxes.yaml",
		"000-03-sandboxupdateops-patch-demo.yaml",
		"000-04-sandboxupdateops-upgrade-sidecar.yaml",
	} {
		t.Run(seed, func(t *testing.T) {
			got, err := ApplyPatch(base, seedPatch(t, seed))
			if err != nil {
				t.Fatalf("apply the patch of %s: %v", seed, err)
			}
			out := mustYAML(t, got)
			path := filepath.Join("testdata", strings.TrimSuffix(seed, ".yaml")+".golden.yaml")
			if *updateGolden {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run: go test ./pkg/upgrade/ -run TestApplyPatchGolden -update)", err)
			}
			if string(out) != string(want) {
				t.Fatalf("the patched template of %s changed (rerun with -update if intended):\n%s\nwant:\n%s", seed, out, want)
			}
		})
	}
}

func TestAddedContainers(t *testing.T) {
	tpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
		Containers:     []corev1.Container{{Name: "sandbox", Image: "v1"}, {Name: "agent-runtime", Image: "rt:v1"}},
	}}
	for _, tc := range []struct {
		name, patch string
		want        []string
	}{
		{"changes an existing container", `{"spec":{"containers":[{"name":"sandbox","image":"v2"}]}}`, nil},
		{"a misspelt name", `{"spec":{"containers":[{"name":"sandbx","image":"v2"}]}}`, []string{"containers/sandbx"}},
		{"a sidecar and an init container added", `{"spec":{"containers":[{"name":"sandbox","image":"v2"},{"name":"log","image":"fluent"}],"initContainers":[{"name":"warm","image":"w"}]}}`, []string{"containers/log", "initContainers/warm"}},
		{"a delete directive adds nothing", `{"spec":{"containers":[{"name":"gone","$patch":"delete"}]}}`, nil},
		{"metadata only", `{"metadata":{"annotations":{"a":"b"}}}`, nil},
		{"not JSON", `[`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AddedContainers(tpl, []byte(tc.patch)); !slices.Equal(got, tc.want) {
				t.Fatalf("AddedContainers = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPatchAloneProblem(t *testing.T) {
	for _, tc := range []struct {
		name, patch, want string
	}{
		{"an image change", `{"spec":{"containers":[{"name":"main","image":"registry.example/app:v2"}]}}`, ""},
		{"with the order directive kubectl writes", `{"spec":{"$setElementOrder/containers":[{"name":"main"}],"containers":[{"name":"main","image":"registry.example/app:v2"}]}}`, ""},
		{"an unknown field", `{"spec":{"containres":[]}}`, "cannot be applied to a pod template"},
		{"the pod's fields without spec around them", `{"containers":[{"name":"main","image":"app:v2"}]}`,
			`(containers: a field of the pod's spec; spec.patch patches the pod template {metadata, spec}, so put it under spec, as spec: {containers: ...})`},
		{"seed 001's patch, with a $patch: delete inside a container", string(seedPatch(t, "001-02-sandboxupdateops-noname.yaml")), ""},
		{"an image the kubelet cannot parse", `{"spec":{"containers":[{"name":"main","image":"Registry/App:V2"}]}}`, "sets an image the kubelet cannot pull"},
		// A quantity's error has no field path of its own: the container, the
		// field and the value are named.
		{"a bad quantity", `{"spec":{"containers":[{"name":"main","image":"app:v2"},{"name":"sidecar","resources":{"limits":{"cpu":"abc"}}}]}}`,
			`not a valid pod template: spec.containers[sidecar].resources.limits.cpu "abc": quantities must match`},
		{"a bad quantity in an init container", `{"spec":{"initContainers":[{"name":"init","resources":{"requests":{"memory":"1 Gi"}}}]}}`,
			`spec.initContainers[init].resources.requests.memory "1 Gi": quantities must match`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PatchAloneProblem([]byte(tc.patch))
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("PatchAloneProblem = %q, want %q", got, tc.want)
			}
		})
	}
}

// A list item without its merge key is the patch's fault; another failure to apply is
// left open (it may be the template's).
func TestMergeKeyProblem(t *testing.T) {
	tpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "a:v1"}}}}
	_, err := ApplyPatch(tpl, []byte(`{"spec":{"containers":[{"image":"a:v2"}]}}`))
	if got := MergeKeyProblem("box", err); !strings.Contains(got, "checked on sandbox box") || !strings.Contains(got, "needs its name") {
		t.Fatalf("MergeKeyProblem = %q, want the patch refused", got)
	}
	if got := MergeKeyProblem("box", errors.New("patched template is not a valid pod template")); got != "" {
		t.Fatalf("MergeKeyProblem of another error = %q, want none", got)
	}
	if got := MergeKeyProblem("box", nil); got != "" {
		t.Fatalf("MergeKeyProblem(nil) = %q", got)
	}
}

// A patch entry that adds a container with no image (meant for a container
// this template names otherwise) would make a pod the API server refuses; one
// that updates a container the template has, or adds one with its image,
// is fine.
func TestAddedWithoutImage(t *testing.T) {
	tpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "v1"}}}}
	for _, tc := range []struct {
		patch string
		want  []string
	}{
		{`{"spec":{"containers":[{"name":"sandbox","env":[{"name":"A","value":"1"}]}]}}`, []string{"containers/sandbox"}},
		{`{"spec":{"containers":[{"name":"sandbox","image":""}]}}`, []string{"containers/sandbox"}},
		{`{"spec":{"initContainers":[{"name":"setup","command":["true"]}]}}`, []string{"initContainers/setup"}},
		{`{"spec":{"containers":[{"name":"main","env":[{"name":"A","value":"1"}]}]}}`, nil},
		{`{"spec":{"containers":[{"name":"sidecar","image":"side:v1"}]}}`, nil},
		{`{"spec":{"containers":[{"name":"gone","$patch":"delete"}]}}`, nil},
	} {
		if got := AddedWithoutImage(tpl, []byte(tc.patch)); !slices.Equal(got, tc.want) {
			t.Errorf("AddedWithoutImage(%s) = %v, want %v", tc.patch, got, tc.want)
		}
	}
}

// ImagelessAdds names only the sandboxes the patch does not fit, and each
// container once.
func TestImagelessAdds(t *testing.T) {
	box := func(name, container string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{}
		sb.Name = name
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: "v1"}}}}
		return sb
	}
	patch := []byte(`{"spec":{"containers":[{"name":"sandbox","env":[{"name":"A","value":"1"}]}]}}`)
	names, added := ImagelessAdds(patch, []*agentsv1alpha1.Sandbox{box("a", "main"), box("b", "sandbox"), box("c", "main"), {}})
	if !slices.Equal(names, []string{"a", "c"}) || !slices.Equal(added, []string{"containers/sandbox"}) {
		t.Errorf("ImagelessAdds = %v, %v; want [a c], [containers/sandbox]", names, added)
	}
}

// An added container joins every upgraded pod, unless it has no image: then
// the sandbox's pod is refused, and its upgrade fails before its backup.
func TestAddedOutcome(t *testing.T) {
	tpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "v1"}}}}
	if got := AddedOutcome(tpl, []byte(`{"spec":{"containers":[{"name":"sidecar","image":"side:v1"}]}}`)); got != "every upgraded pod gets it beside the others" {
		t.Errorf("a sidecar with its image: %q", got)
	}
	if got := AddedOutcome(tpl, []byte(`{"spec":{"containers":[{"name":"sandbox","env":[{"name":"A","value":"1"}]}]}}`)); !strings.Contains(got, "containers/sandbox has no image") || !strings.Contains(got, "PreUpgradeFailed") {
		t.Errorf("an imageless add: %q", got)
	}
}
