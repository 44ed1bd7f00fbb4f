package devcluster

import (
	"context"
	"fmt"
	"os"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// AdmissionPolicyFile is deploy/admission's policy, relative to the
// repository's root: one active SandboxUpdateOps per namespace.
const AdmissionPolicyFile = "deploy/admission/one-active-ops.yaml"

// SandboxLabelsPolicyFile is deploy/admission's policy on the values of the
// sandbox-claimed label, relative to the repository's root.
const SandboxLabelsPolicyFile = "deploy/admission/sandbox-labels.yaml"

// AdmissionPolicyFiles are the policies of deploy/admission a local control
// plane installs (not service-pod-writes.yaml: its matches name the
// ServiceAccounts of deploy/base).
var AdmissionPolicyFiles = []string{AdmissionPolicyFile, SandboxLabelsPolicyFile}

// InstallAdmissionPolicy creates or updates the ValidatingAdmissionPolicies
// and their bindings in each of files (YAML documents separated by ---), as
// `kubectl apply` of deploy/admission would. Install the CRDs their
// paramKind names first.
func InstallAdmissionPolicy(ctx context.Context, cfg *rest.Config, files ...string) error {
	for _, file := range files {
		if err := installAdmissionPolicy(ctx, cfg, file); err != nil {
			return err
		}
	}
	return nil
}

func installAdmissionPolicy(ctx context.Context, cfg *rest.Config, file string) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("build kubernetes client: %w", err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read admission policy: %w", err)
	}
	admission := kube.AdmissionregistrationV1()
	for _, doc := range strings.Split(string(data), "\n---") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return fmt.Errorf("decode %s: %w", file, err)
		}
		switch meta.Kind {
		case "":
			continue
		case "ValidatingAdmissionPolicy":
			err = createOrUpdate(ctx, admission.ValidatingAdmissionPolicies(), doc, &admissionregistrationv1.ValidatingAdmissionPolicy{})
		case "ValidatingAdmissionPolicyBinding":
			err = createOrUpdate(ctx, admission.ValidatingAdmissionPolicyBindings(), doc, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{})
		default:
			return fmt.Errorf("%s: unexpected kind %s (want ValidatingAdmissionPolicy or ValidatingAdmissionPolicyBinding)", file, meta.Kind)
		}
		if err != nil {
			return fmt.Errorf("apply %s from %s: %w", meta.Kind, file, err)
		}
	}
	return nil
}

// createUpdater is a typed client's Get, Create and Update of T.
type createUpdater[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// createOrUpdate decodes doc strictly into obj and creates it, or updates
// the one of its name at its resourceVersion.
func createOrUpdate[T metav1.Object](ctx context.Context, c createUpdater[T], doc string, obj T) error {
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	existing, err := c.Get(ctx, obj.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Create(ctx, obj, metav1.CreateOptions{})
	case err == nil:
		obj.SetResourceVersion(existing.GetResourceVersion())
		_, err = c.Update(ctx, obj, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("%s: %w", obj.GetName(), err)
	}
	return nil
}
