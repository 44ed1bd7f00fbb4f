package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Refusal is an admission policy a test installs so that the API server
// refuses some writes in one namespace, as a Kyverno or Gatekeeper policy, a
// webhook or a ValidatingAdmissionPolicy of the cluster's owner would.
type Refusal struct {
	// Group and Resource name what is refused ("" and "pods"; "agents.kruise.io"
	// and "sandboxes").
	Group, Resource string
	// Operations are the refused operations (UPDATE, CREATE, DELETE).
	Operations []admissionregistrationv1.OperationType
	// Allow is a CEL expression over object/oldObject that is true for a
	// request the policy lets through.
	Allow string
	// Message is the policy's words in the API server's answer.
	Message string
	// Reason is the answer's reason: "" is a ValidatingAdmissionPolicy's
	// default, Forbidden (403); Invalid gives a 422, as a failed test
	// operation of a JSON patch does.
	Reason metav1.StatusReason
}

// Refuse installs r in ns as a ValidatingAdmissionPolicy and its binding
// (removed when the test ends) and waits until the API server enforces it:
// until probe, a write (a dry run will do) that r refuses, fails with r's
// message. Admission policies are read through an informer, so a write made
// at once may still get through.
func (e *Env) Refuse(t testing.TB, ns string, r Refusal, probe func(ctx context.Context) error) {
	t.Helper()
	ctx := context.Background()
	name := "refuse-" + ns + "-" + strings.ToLower(r.Resource)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: r.Operations,
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{r.Group}, APIVersions: []string{"*"}, Resources: []string{r.Resource}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: r.Allow, Message: r.Message}},
		},
	}
	if r.Reason != "" {
		policy.Spec.Validations[0].Reason = &r.Reason
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns},
			}},
		},
	}
	admission := e.Kube.AdmissionregistrationV1()
	if _, err := admission.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ValidatingAdmissionPolicy %s: %v", name, err)
	}
	t.Cleanup(func() {
		for _, err := range []error{
			admission.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}),
			admission.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}),
		} {
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete admission policy %s: %v", name, err)
			}
		}
	})
	if _, err := admission.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ValidatingAdmissionPolicyBinding %s: %v", name, err)
	}
	Eventually(t, 30*time.Second, "the API server to enforce admission policy "+name, func() (bool, error) {
		err := probe(ctx)
		if err == nil {
			return false, fmt.Errorf("the probe was accepted")
		}
		return strings.Contains(err.Error(), r.Message), fmt.Errorf("the probe failed with %q, want %q", err.Error(), r.Message)
	})
}

func ptr[T any](v T) *T { return &v }
