package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestRefusal(t *testing.T) {
	sandboxes := schema.GroupResource{Group: "agents.kruise.io", Resource: "sandboxes"}
	terminating := apierrors.NewForbidden(sandboxes, "sbx", errors.New("unable to create new content in namespace ns because it is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace ns is being terminated"}}
	policy := apierrors.NewInvalid(schema.GroupKind{Group: "agents.kruise.io", Kind: "Sandbox"}, "sbx",
		field.ErrorList{field.Invalid(field.NewPath("spec", "template"), "", `ValidatingAdmissionPolicy 'deny-image' with binding 'deny-image' denied request: image denied`)})
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"nil", nil, false},
		{"an admission policy's Invalid", policy, true},
		{"a webhook's Forbidden", apierrors.NewForbidden(sandboxes, "sbx", errors.New(`admission webhook "policy.example" denied the request`)), true},
		{"RBAC", apierrors.NewForbidden(sandboxes, "sbx", errors.New(`User "system:serviceaccount:molt:patcher" cannot patch resource "sandboxes"`)), true},
		{"bad request", apierrors.NewBadRequest("the patch is not valid JSON"), true},
		{"too large", apierrors.NewRequestEntityTooLargeError("limit is 3145728"), true},
		{"wrapped", fmt.Errorf("patch sandbox ns/sbx spec: %w", policy), true},
		{"namespace being deleted", terminating, false},
		{"conflict", apierrors.NewConflict(sandboxes, "sbx", errors.New("the object has been modified")), false},
		{"not found", apierrors.NewNotFound(sandboxes, "sbx"), false},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), false},
		{"timeout", apierrors.NewTimeoutError("request did not complete", 1), false},
		{"server error", apierrors.NewInternalError(errors.New("etcdserver: leader changed")), false},
		{"unavailable", apierrors.NewServiceUnavailable("apiserver is shutting down"), false},
		{"connection", errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"), false},
		{"cancelled", context.Canceled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Refusal(tc.err)
			if (got != "") != tc.refused {
				t.Fatalf("Refusal(%v) = %q, want refused %v", tc.err, got, tc.refused)
			}
			if tc.refused && strings.HasPrefix(got, "patch sandbox") {
				t.Errorf("Refusal = %q: want the API server's words, not the caller's wrapping", got)
			}
		})
	}
	long := apierrors.NewForbidden(sandboxes, "sbx", errors.New(strings.Repeat("x", 2000)))
	if got := Refusal(long); len(got) != maxRefusalWords {
		t.Errorf("Refusal of a long message is %d bytes, want %d", len(got), maxRefusalWords)
	}
}
