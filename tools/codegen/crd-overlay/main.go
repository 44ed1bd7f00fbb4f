// Command crd-overlay adds to a generated CRD the part of a schema that
// controller-gen cannot express from Go markers: the properties of a
// schemaless field, so that CEL rules can read them.
//
// SandboxUpdateOps spec.patch is a runtime.RawExtension kept byte for byte
// (x-kubernetes-preserve-unknown-fields). CEL sees no field of such an
// object, so the rule "a CheckpointRestore ops cannot change an image"
// needs spec.patch.spec.containers[].image and initContainers[].image
// declared; hack/crd-overlays holds those properties and
// hack/update-codegen.sh runs this command after controller-gen.
//
// Usage: crd-overlay -crd FILE -field spec.patch -properties OVERLAY.yaml
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "crd-overlay:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("crd-overlay", flag.ContinueOnError)
	crdPath := fs.String("crd", "", "generated CRD file, changed in place")
	field := fs.String("field", "", "dotted path of the field under openAPIV3Schema, e.g. spec.patch")
	propsPath := fs.String("properties", "", "YAML file with the properties to give that field")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *crdPath == "" || *field == "" || *propsPath == "" {
		return errors.New("-crd, -field and -properties are required")
	}

	var props map[string]any
	if err := readYAML(*propsPath, &props); err != nil {
		return err
	}
	var crd map[string]any
	if err := readYAML(*crdPath, &crd); err != nil {
		return err
	}
	spec, _ := crd["spec"].(map[string]any)
	versions, _ := spec["versions"].([]any)
	if len(versions) == 0 {
		return fmt.Errorf("%s: no spec.versions", *crdPath)
	}
	for _, v := range versions {
		node, err := schemaNode(v, *field)
		if err != nil {
			return fmt.Errorf("%s: %w", *crdPath, err)
		}
		if _, ok := node["properties"]; ok {
			return fmt.Errorf("%s: %s already has properties; the overlay would replace them", *crdPath, *field)
		}
		node["properties"] = props
	}

	out, err := yaml.Marshal(crd)
	if err != nil {
		return fmt.Errorf("encode %s: %w", *crdPath, err)
	}
	// controller-gen starts every file with a document separator.
	return os.WriteFile(*crdPath, append([]byte("---\n"), out...), 0o644)
}

// schemaNode returns the schema of the dotted field path in one CRD version.
func schemaNode(version any, field string) (map[string]any, error) {
	v, _ := version.(map[string]any)
	schema, _ := v["schema"].(map[string]any)
	node, _ := schema["openAPIV3Schema"].(map[string]any)
	if node == nil {
		return nil, fmt.Errorf("version %v has no openAPIV3Schema", v["name"])
	}
	for _, key := range strings.Split(field, ".") {
		props, _ := node["properties"].(map[string]any)
		next, _ := props[key].(map[string]any)
		if next == nil {
			return nil, fmt.Errorf("version %v: no field %s", v["name"], field)
		}
		node = next
	}
	return node, nil
}

func readYAML(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}
