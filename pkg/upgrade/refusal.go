package upgrade

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// maxRefusalWords bounds the API server's words in a failure message, so the
// sentence around them (what was left untouched, what to do next) survives the
// condition's cap.
const maxRefusalWords = 600

// Refusal returns the API server's words when err refuses a write for good,
// and "" when a retry may get past it. Refused for good: Forbidden (an
// admission policy or webhook, the writer's RBAC, a quota), Invalid
// (validation, a ValidatingAdmissionPolicy's default answer), BadRequest and
// RequestEntityTooLarge: the same request gets the same answer until a person
// changes something. Retried: everything else (Conflict, NotFound, a timeout,
// 429, a 5xx, a connection error), and a Forbidden that says the namespace
// is being deleted (the object goes with it; nobody needs to be told).
//
// A JSON patch whose test operation fails is Invalid too: a caller whose
// write carries one must first make sure the object is still as read before
// it calls the answer a refusal (see the patcher's spec write).
func Refusal(err error) string {
	switch {
	case err == nil:
		return ""
	case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return ""
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err):
	default:
		return ""
	}
	words := err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		words = status.Status().Message
	}
	return agentsv1alpha1.TruncateConditionMessageTo(words, maxRefusalWords)
}
