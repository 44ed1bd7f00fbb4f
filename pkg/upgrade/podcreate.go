package upgrade

import (
	"errors"
	"regexp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// AnnotationPodCreateError is the Sandbox annotation podcycler writes when
// the API server refuses the sandbox's pod (PodCreateRefused: a
// ResourceQuota, the namespace's Pod Security level, an admission webhook),
// with the server's words, and removes once the pod is created. podcycler
// keeps retrying meanwhile. statusagg shows it as Ready=False
// PodCreateFailed and a Warning Event of that reason, so the sandbox that
// stays Pending says why.
const AnnotationPodCreateError = "molt.dev/pod-create-error"

// AnnotationPodDeleteError is the Sandbox annotation podcycler writes when
// the API server refuses for good (Refusal) the delete of a paused
// sandbox's pod, with the server's words, and removes once the pod is gone
// or the sandbox is unpaused. podcycler keeps retrying meanwhile. statusagg
// shows it as SandboxPaused=False PodDeleteRefused, in the MESSAGE column,
// and as a Warning Event of that reason, so a pause that does not happen
// says why.
const AnnotationPodDeleteError = "molt.dev/pod-delete-error"

// maxPodCreateError bounds the annotation: statusagg adds a sentence of its
// own around it in a condition message.
const maxPodCreateError = 700

// PodCreateRefused reports whether err is a refusal of a pod create that a
// retry alone may not get past (Forbidden, Invalid, BadRequest), as opposed
// to a transient failure or a pod that exists already.
func PodCreateRefused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// quotaUsed is the part of a ResourceQuota refusal that changes as other
// pods come and go ("used: pods=5,requests.cpu=2"): left out, a sandbox
// waiting on a full quota is not written again, nor announced again, each
// time its neighbours change.
var quotaUsed = regexp.MustCompile(`, used: \S*, limited: `)

// PodCreateErrorValue is the annotation's value for the refusal err: its
// words, without what changes from one retry to the next.
func PodCreateErrorValue(err error) string {
	return agentsv1alpha1.TruncateConditionMessageTo(quotaUsed.ReplaceAllString(err.Error(), ", limited: "), maxPodCreateError)
}

// AnnotationMemberCreateError is the SandboxSet annotation the selector
// writes while the API server refuses to create the set's members
// (PodCreateRefused's kinds: a ResourceQuota on sandboxes, an admission
// webhook, the selector's RBAC), with the server's words, and removes once
// a member is created or none is needed. The pool keeps retrying
// meanwhile. statusagg shows it as the set's MemberCreateRefused condition
// and a Warning Event of that name.
const AnnotationMemberCreateError = "molt.dev/member-create-error"

// MemberCreateErrorValue is AnnotationMemberCreateError's value for the
// refusal err of a member of the set named set: the API server's words,
// without what changes from one retry to the next (the name generated for
// the member, a quota's used amounts).
func MemberCreateErrorValue(err error, set string) string {
	msg := err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		msg = status.Status().Message
	}
	return agentsv1alpha1.TruncateConditionMessageTo(withoutVolatile(msg, set+"-", set+"-…"), maxPodCreateError)
}
