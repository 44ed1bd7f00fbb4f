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

// InstallAdmissionPolicy creates or updates the ValidatingAdmissionPolicies
// and their bindings in file (YAML documents separated by ---), as
// `kubectl apply` of deploy/admission would. Install the CRDs their
// paramKind names first.
func InstallAdmissionPolicy(ctx context.Context, cfg *rest.Config, file string) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("build kubernetes client: %w", err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read admission policy: %w", err)
	}
	policies := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	bindings := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	for _, doc := range strings.Split(string(data), "\n---") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return fmt.Errorf("decode %s: %w", file, err)
		}
		switch meta.Kind {
		case "":
			continue
		case "ValidatingAdmissionPolicy":
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				return fmt.Errorf("decode %s: %w", file, err)
			}
			existing, err := policies.Get(ctx, p.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err = policies.Create(ctx, &p, metav1.CreateOptions{})
			case err == nil:
				p.ResourceVersion = existing.ResourceVersion
				_, err = policies.Update(ctx, &p, metav1.UpdateOptions{})
			}
			if err != nil {
				return fmt.Errorf("apply ValidatingAdmissionPolicy %s from %s: %w", p.Name, file, err)
			}
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &b); err != nil {
				return fmt.Errorf("decode %s: %w", file, err)
			}
			existing, err := bindings.Get(ctx, b.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err = bindings.Create(ctx, &b, metav1.CreateOptions{})
			case err == nil:
				b.ResourceVersion = existing.ResourceVersion
				_, err = bindings.Update(ctx, &b, metav1.UpdateOptions{})
			}
			if err != nil {
				return fmt.Errorf("apply ValidatingAdmissionPolicyBinding %s from %s: %w", b.Name, file, err)
			}
		default:
			return fmt.Errorf("%s: unexpected kind %s (want ValidatingAdmissionPolicy or ValidatingAdmissionPolicyBinding)", file, meta.Kind)
		}
	}
	return nil
}
