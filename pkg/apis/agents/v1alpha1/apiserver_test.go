package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"molt.dev/pkg/apis/agents/v1alpha1"
)

// This file checks deploy/crds the way kube-apiserver would, without one:
// each CRD must pass the API server's CRD validation (structural schema,
// CEL rules compiled and within cost limits, printer columns), and objects
// go through the create and update path of a custom resource: pruning with
// unknown fields reported (kubectl's default strict field validation turns
// them into errors), defaulting, OpenAPI validation, list-type invariants and
// CEL rules. Run hack/update-codegen.sh after changing the types.

const crdDir = "../../../../deploy/crds"

// crdUnderTest is one served version of a CRD, ready to validate objects.
type crdUnderTest struct {
	crd        *apiextensions.CustomResourceDefinition
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

// loadCRDs reads deploy/crds and returns the CRDs by kind, failing the test
// if the API server would refuse any of them.
func loadCRDs(t *testing.T) map[string]*crdUnderTest {
	t.Helper()
	scheme := runtime.NewScheme()
	apiextensionsinstall.Install(scheme)

	paths, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no CRDs in %s (%v): run hack/update-codegen.sh", crdDir, err)
	}
	crds := map[string]*crdUnderTest{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		var v1crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &v1crd); err != nil {
			t.Fatalf("decode %s: %v", path, err)
		}
		scheme.Default(&v1crd)
		var crd apiextensions.CustomResourceDefinition
		if err := scheme.Convert(&v1crd, &crd, nil); err != nil {
			t.Fatalf("convert %s: %v", path, err)
		}
		// What the API server's PrepareForCreate does for a new CRD.
		crd.Status.StoredVersions = []string{"v1alpha1"}
		if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), &crd); len(errs) > 0 {
			t.Fatalf("the API server would refuse %s:\n%s", path, errs.ToAggregate())
		}

		validation, err := apiextensions.GetSchemaForVersion(&crd, "v1alpha1")
		if err != nil || validation == nil {
			t.Fatalf("%s: no schema for v1alpha1: %v", path, err)
		}
		structural, err := structuralschema.NewStructural(validation.OpenAPIV3Schema)
		if err != nil {
			t.Fatalf("%s: structural schema: %v", path, err)
		}
		schemaValidator, _, err := apiservervalidation.NewSchemaValidator(validation.OpenAPIV3Schema)
		if err != nil {
			t.Fatalf("%s: schema validator: %v", path, err)
		}
		crds[crd.Spec.Names.Kind] = &crdUnderTest{
			crd:        &crd,
			structural: structural,
			schema:     schemaValidator,
			cel:        cel.NewValidator(structural, true, celconfig.PerCallLimit),
		}
	}
	return crds
}

// admitted is an object after the API server's decoding: pruned and
// defaulted, with the unknown fields it dropped.
type admitted struct {
	obj     map[string]any
	unknown []string
}

// decode runs an object through the API server's decoding: pruning (which
// reports unknown fields) and defaulting.
func (c *crdUnderTest) decode(obj map[string]any) admitted {
	obj = runtime.DeepCopyJSON(obj)
	unknown := structuralpruning.PruneWithOptions(obj, c.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, c.structural)
	structuraldefaulting.Default(obj, c.structural)
	return admitted{obj: obj, unknown: unknown}
}

// create returns the errors the API server gives for creating obj, and the
// object as it would be stored.
func (c *crdUnderTest) create(obj map[string]any) (map[string]any, field.ErrorList) {
	a := c.decode(obj)
	errs := unknownFieldErrors(a.unknown)
	if c.crd.Spec.Subresources != nil && c.crd.Spec.Subresources.Status != nil {
		delete(a.obj, "status") // create cannot set status
	}
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, a.obj, c.schema)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, c.structural, a.obj)...)
	if len(errs) == 0 {
		celErrs, _ := c.cel.Validate(context.Background(), nil, c.structural, a.obj, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	return a.obj, errs
}

// update returns the errors the API server gives for replacing the stored
// object old with obj.
func (c *crdUnderTest) update(old, obj map[string]any) field.ErrorList {
	a := c.decode(obj)
	errs := unknownFieldErrors(a.unknown)
	if status, ok := old["status"]; ok {
		a.obj["status"] = status
	} else {
		delete(a.obj, "status")
	}
	errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, a.obj, old, c.schema)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, c.structural, a.obj)...)
	if len(errs) == 0 {
		celErrs, _ := c.cel.Validate(context.Background(), nil, c.structural, a.obj, old, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	return errs
}

// unknownFieldErrors is what strict field validation (kubectl's default)
// makes of the fields pruning dropped.
func unknownFieldErrors(paths []string) field.ErrorList {
	var errs field.ErrorList
	for _, p := range paths {
		errs = append(errs, field.NotSupported[string](field.NewPath(p), "", nil))
	}
	return errs
}

// readYAML reads a YAML file into a JSON object.
func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return parseYAML(t, string(data))
}

// parseYAML decodes a YAML document into a JSON object.
func parseYAML(t *testing.T, doc string) map[string]any {
	t.Helper()
	// Decode numbers as the API server does: integers as int64.
	data, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("decode %q: %v", doc, err)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(data, &obj); err != nil {
		t.Fatalf("decode %q: %v", doc, err)
	}
	return obj
}

// setPath sets a value at a dotted path of obj ("spec.updateStrategy.type"),
// creating maps on the way; a nil value deletes the field.
func setPath(obj map[string]any, path string, value any) {
	keys := strings.Split(path, ".")
	m := obj
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	last := keys[len(keys)-1]
	if value == nil {
		delete(m, last)
		return
	}
	m[last] = value
}

// checkErrors fails the test unless errs is empty (wantErr "") or its text
// contains wantErr.
func checkErrors(t *testing.T, errs field.ErrorList, wantErr string) {
	t.Helper()
	if wantErr == "" {
		if len(errs) > 0 {
			t.Fatalf("refused: %v", errs.ToAggregate())
		}
		return
	}
	if len(errs) == 0 {
		t.Fatalf("accepted, want error containing %q", wantErr)
	}
	got := errs.ToAggregate().Error()
	t.Logf("refused as expected: %s", got)
	if !strings.Contains(got, wantErr) {
		t.Fatalf("error %q\ndoes not contain %q", got, wantErr)
	}
}

// newObject returns an empty Go object of kind, through the package's
// scheme registration.
func newObject(kind string) (runtime.Object, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme.New(v1alpha1.SchemeGroupVersion.WithKind(kind))
}
