package devcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// InstallCRDs creates or updates every CRD in dir (*.yaml) and waits until
// each is Established.
func InstallCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("build apiextensions client: %w", err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRD manifests in %s: run `make generate`", dir)
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("read CRD %s: %w", f, err)
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict([]byte(doc), &crd); err != nil {
				return fmt.Errorf("decode CRD %s: %w", f, err)
			}
			existing, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err = crds.Create(ctx, &crd, metav1.CreateOptions{})
			case err == nil:
				crd.ResourceVersion = existing.ResourceVersion
				_, err = crds.Update(ctx, &crd, metav1.UpdateOptions{})
			}
			if err != nil {
				return fmt.Errorf("apply CRD %s from %s: %w", crd.Name, f, err)
			}
			names = append(names, crd.Name)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, name := range names {
		for {
			crd, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get CRD %s: %w", name, err)
			}
			if established(crd) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not Established after 60s: %v", name, crd.Status.Conditions)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
