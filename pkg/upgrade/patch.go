package upgrade

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	kjson "sigs.k8s.io/json"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// ApplyPatch applies an ops patch (raw JSON bytes, a Strategic Merge Patch on
// a PodTemplateSpec {metadata, spec}) to tpl and returns the result; tpl is
// not changed. The raw bytes go to strategicpatch unchanged so `$patch:
// delete` directives survive; only `spec.containers: null` (what an empty
// PodSpec serialises to) is dropped first. Explicit `containers: []` and
// other nulls are honoured.
func ApplyPatch(tpl *corev1.PodTemplateSpec, patch []byte) (*corev1.PodTemplateSpec, error) {
	if tpl == nil {
		tpl = &corev1.PodTemplateSpec{}
	}
	if len(bytes.TrimSpace(patch)) == 0 || bytes.Equal(bytes.TrimSpace(patch), []byte("null")) {
		return tpl.DeepCopy(), nil
	}
	patch, err := dropNullContainers(patch)
	if err != nil {
		return nil, err
	}
	original, err := json.Marshal(tpl)
	if err != nil {
		return nil, fmt.Errorf("encode template: %w", err)
	}
	merged, err := strategicpatch.StrategicMergePatch(original, patch, corev1.PodTemplateSpec{})
	if err != nil {
		return nil, fmt.Errorf("apply strategic merge patch: %w", err)
	}
	// Decoded as the API server decodes: field names are case-sensitive, and an
	// unknown or repeated one is an error. (encoding/json would take `Image` for
	// `image`, and the template's own `image`, sorted after it, would win: the patch
	// would change nothing, silently.)
	out := &corev1.PodTemplateSpec{}
	strict, err := kjson.UnmarshalStrict(merged, out)
	if err == nil && len(strict) > 0 {
		err = errors.Join(strict...)
	}
	if err != nil {
		return nil, fmt.Errorf("patched template is not a valid pod template: %s%w", badContainer(merged), err)
	}
	return out, nil
}

// badContainer names the first container of a template that does not decode, as
// "spec.containers[<name>]: ", so that an error without a field path (a quantity's) says
// where it is; "" when every container decodes or the template is not an object.
func badContainer(template []byte) string {
	var t struct {
		Spec struct {
			InitContainers []json.RawMessage `json:"initContainers"`
			Containers     []json.RawMessage `json:"containers"`
		} `json:"spec"`
	}
	if json.Unmarshal(template, &t) != nil {
		return ""
	}
	lists := []struct {
		field string
		items []json.RawMessage
	}{{"initContainers", t.Spec.InitContainers}, {"containers", t.Spec.Containers}}
	for _, list := range lists {
		for i, raw := range list.items {
			var c corev1.Container
			if strict, err := kjson.UnmarshalStrict(raw, &c); err == nil && len(strict) == 0 {
				continue
			}
			var named struct {
				Name string `json:"name"`
			}
			where := fmt.Sprintf("spec.%s[%d]", list.field, i)
			if json.Unmarshal(raw, &named) == nil && named.Name != "" {
				where = fmt.Sprintf("spec.%s[%s]", list.field, named.Name)
			}
			return where + badQuantity(raw) + ": "
		}
	}
	return ""
}

// badQuantity names the first resource quantity of a container that does not
// parse, as ".resources.limits.cpu \"1 core\"" (the decoder's error names
// neither); "" when none is found.
func badQuantity(container []byte) string {
	var c struct {
		Resources map[string]map[string]json.RawMessage `json:"resources"`
	}
	if json.Unmarshal(container, &c) != nil {
		return ""
	}
	for _, kind := range []string{"limits", "requests"} {
		names := make([]string, 0, len(c.Resources[kind]))
		for name := range c.Resources[kind] {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			raw := c.Resources[kind][name]
			var q resource.Quantity
			if err := json.Unmarshal(raw, &q); err != nil {
				return fmt.Sprintf(".resources.%s.%s %s", kind, name, raw)
			}
		}
	}
	return ""
}

// PatchAloneProblem says what is wrong with an ops patch before it is tried on any
// sandbox's template: it does not apply to a pod template, or it sets an image the
// kubelet cannot parse (which the API server's dry run lets through, ImageProblem).
// "" when neither. The selector's patch check and `kubectl molt plan` start with it.
func PatchAloneProblem(raw []byte) string {
	// On an empty template (containers null), a patch's container is taken
	// whole, its nested directives (`$patch: delete` on a volumeMount) dropped;
	// but a `$setElementOrder/containers` directive cannot order a null list.
	// On an empty list the reverse holds. A patch that applies to either
	// applies to real templates, which is what this check asks.
	alone, err := ApplyPatch(&corev1.PodTemplateSpec{}, raw)
	if err != nil {
		var errList error
		if alone, errList = ApplyPatch(&corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{}}}, raw); errList != nil {
			return fmt.Sprintf("spec.patch cannot be applied to a pod template: %v%s", err, misplacedPodFields(raw))
		}
	}
	if bad := ImageProblem(&alone.Spec); bad != "" {
		return "spec.patch sets an image the kubelet cannot pull: " + bad
	}
	return ""
}

// podSpecFields are the JSON names of a pod spec's fields.
var podSpecFields = func() map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeFor[corev1.PodSpec]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out[name] = true
		}
	}
	return out
}()

// misplacedPodFields says which top-level keys of the patch raw are fields of
// a pod's spec, written without the template's `spec:` around them (a walk's
// `patch: {containers: [...]}`), and where they go; "" for none.
func misplacedPodFields(raw []byte) string {
	var doc map[string]json.RawMessage
	if json.Unmarshal(raw, &doc) != nil {
		return ""
	}
	var misplaced []string
	for key := range doc {
		if podSpecFields[key] {
			misplaced = append(misplaced, key)
		}
	}
	if len(misplaced) == 0 {
		return ""
	}
	slices.Sort(misplaced)
	return fmt.Sprintf(" (%s: a field of the pod's spec; spec.patch patches the pod template {metadata, spec}, so put it under spec, as spec: {%s: ...})",
		strings.Join(misplaced, ", "), misplaced[0])
}

// MergeKeyProblem is the patch check's verdict on err, the failure to apply an ops
// patch to the template of sandbox: when a list item of the patch lacks its merge key
// (a container, env var, volume or mount without its name), the patch is at fault
// whatever the template (with no such list to merge into, the item lands in the pod
// nameless, which the API server refuses), so the patch check refuses it. "" for any
// other failure, which may be that sandbox's template's own.
func MergeKeyProblem(sandbox string, err error) string {
	if err == nil || !strings.Contains(err.Error(), "does not contain declared merge key") {
		return ""
	}
	return fmt.Sprintf("spec.patch cannot be applied (checked on sandbox %s): %v: every item of a list such as containers, initContainers, env, volumes or volumeMounts needs its name", sandbox, err)
}

// dropNullContainers removes spec.containers when it is JSON null.
func dropNullContainers(patch []byte) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(patch, &doc); err != nil {
		return nil, fmt.Errorf("patch is not a JSON/YAML object: %w", err)
	}
	rawSpec, ok := doc["spec"]
	if !ok {
		return patch, nil
	}
	var spec map[string]json.RawMessage
	if err := json.Unmarshal(rawSpec, &spec); err != nil || spec == nil {
		return patch, nil
	}
	if c, ok := spec["containers"]; !ok || !bytes.Equal(bytes.TrimSpace(c), []byte("null")) {
		return patch, nil
	}
	delete(spec, "containers")
	newSpec, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	doc["spec"] = newSpec
	return json.Marshal(doc)
}

// SetsImage reports whether a patch sets any container or init-container
// image (refused under CheckpointRestore).
func SetsImage(patch []byte) (bool, error) {
	if len(bytes.TrimSpace(patch)) == 0 {
		return false, nil
	}
	var doc struct {
		Spec struct {
			Containers     []map[string]json.RawMessage `json:"containers"`
			InitContainers []map[string]json.RawMessage `json:"initContainers"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(patch, &doc); err != nil {
		return false, fmt.Errorf("patch is not a JSON/YAML object: %w", err)
	}
	for _, list := range [][]map[string]json.RawMessage{doc.Spec.Containers, doc.Spec.InitContainers} {
		for _, c := range list {
			if _, ok := c["image"]; ok {
				return true, nil
			}
		}
	}
	return false, nil
}

// AddedContainers returns the containers and init containers that patch adds to tpl:
// entries of spec.containers or spec.initContainers whose name tpl does not have (and
// that are not `$patch` directives), as "containers/<name>" or "initContainers/<name>".
// A strategic merge adds such an entry as a new container, which is how a sidecar is
// added, and also what a misspelt container name does: the real container is left as
// it was, and every upgraded pod gets one more. An unparsable patch adds nothing here
// (the patch check reports it).
func AddedContainers(tpl *corev1.PodTemplateSpec, patch []byte) []string {
	var added []string
	for _, list := range containerLists(tpl, patch) {
		for _, e := range list.entries {
			var name string
			if _, directive := e["$patch"]; directive || json.Unmarshal(e["name"], &name) != nil || name == "" {
				continue
			}
			if !slices.ContainsFunc(list.have, func(c corev1.Container) bool { return c.Name == name }) {
				added = append(added, list.field+"/"+name)
			}
		}
	}
	return added
}

// AddedWithoutImage returns the containers and init containers that patch
// adds to tpl (AddedContainers) with no image: a pod made from the patched
// template is refused (its image is required), which is what a patch meant
// for a container this sandbox names otherwise does (its template has `main`
// where the patch says `sandbox`).
func AddedWithoutImage(tpl *corev1.PodTemplateSpec, patch []byte) []string {
	var bare []string
	for _, list := range containerLists(tpl, patch) {
		for _, e := range list.entries {
			var name, image string
			if _, directive := e["$patch"]; directive || json.Unmarshal(e["name"], &name) != nil || name == "" ||
				slices.ContainsFunc(list.have, func(c corev1.Container) bool { return c.Name == name }) {
				continue
			}
			if raw, ok := e["image"]; !ok || json.Unmarshal(raw, &image) != nil || image == "" {
				bare = append(bare, list.field+"/"+name)
			}
		}
	}
	return bare
}

// containerList is one of a patch's container lists beside tpl's.
type containerList struct {
	field   string // "containers" or "initContainers"
	entries []map[string]json.RawMessage
	have    []corev1.Container
}

// containerLists pairs patch's spec.containers and spec.initContainers
// entries with tpl's containers and init containers; none when tpl is nil or
// the patch does not parse (the patch check reports that).
func containerLists(tpl *corev1.PodTemplateSpec, patch []byte) []containerList {
	var doc struct {
		Spec struct {
			Containers     []map[string]json.RawMessage `json:"containers"`
			InitContainers []map[string]json.RawMessage `json:"initContainers"`
		} `json:"spec"`
	}
	if tpl == nil || json.Unmarshal(patch, &doc) != nil {
		return nil
	}
	return []containerList{{"containers", doc.Spec.Containers, tpl.Spec.Containers}, {"initContainers", doc.Spec.InitContainers, tpl.Spec.InitContainers}}
}

// ImagelessAdds names the sandboxes of sbs whose template patch adds a
// container with no image to (AddedWithoutImage), and those containers, each
// once.
func ImagelessAdds(patch []byte, sbs []*agentsv1alpha1.Sandbox) (names, added []string) {
	for _, sb := range sbs {
		bare := AddedWithoutImage(sb.Spec.Template, patch)
		if len(bare) == 0 {
			continue
		}
		names = append(names, sb.Name)
		for _, b := range bare {
			if !slices.Contains(added, b) {
				added = append(added, b)
			}
		}
	}
	return names, added
}

// ImagelessRetryHint is what to do next about sandboxes (named, of
// namespace) an ops failed, or would start, whose template its patch adds
// containers (added) with no image to (ImagelessAdds): a retry keeps the
// patch, and fails them again before their backup, each taking a place of
// maxUnavailable (or fails whole, InvalidPatch, when the patch is checked on
// one of them). others is true when the retry would start other sandboxes,
// which the patch fits.
func ImagelessRetryHint(named, namespace string, added []string, others bool) string {
	hint := fmt.Sprintf("the patch adds %s with no image to %s, whose template names its containers otherwise (nothing of theirs was changed): `kubectl molt retry`, which keeps the patch, would fail them again before their backup (each taking a place of maxUnavailable), so upgrade them with a new SandboxUpdateOps whose patch names their container (`kubectl get sbx NAME -n %s -o jsonpath='{.spec.template.spec.containers[*].name}'`) and whose selector takes only them",
		strings.Join(added, ", "), named, namespace)
	if others {
		hint += "; for the others, create a SandboxUpdateOps with this patch whose selector leaves those out (label them, `kubectl label sbx NAME -n " + namespace + " molt-skip=true`, and add `{key: molt-skip, operator: DoesNotExist}` to its selector's matchExpressions)"
	}
	return hint + "; `kubectl molt plan -f FILE` checks each first"
}

// AddedOutcome says what a patch that adds containers to tpl (AddedContainers)
// does to a sandbox of that template: each upgraded pod gets them beside the
// others, unless one has no image (AddedWithoutImage), whose pod is refused.
func AddedOutcome(tpl *corev1.PodTemplateSpec, patch []byte) string {
	if bare := AddedWithoutImage(tpl, patch); len(bare) > 0 {
		return fmt.Sprintf("%s has no image, so such a sandbox's pod would be refused and its upgrade fails before its backup (PreUpgradeFailed), touching nothing", strings.Join(bare, ", "))
	}
	return "every upgraded pod gets it beside the others"
}
