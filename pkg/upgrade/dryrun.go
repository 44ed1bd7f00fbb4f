package upgrade

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// DryRunCreatePod asks the API server whether it would create pod: a
// server-side dry run under a name generated from pod's (its own name may
// still be taken by the pod it replaces). It returns the server's words
// when it refuses the pod for good (see PodRefusal), and an error for
// anything a retry may fix. The words are the same from one call to the
// next while the cause is (StableRefusal), so a recorded refusal is not
// written, nor announced, again for nothing.
func DryRunCreatePod(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) (refused string, err error) {
	probe := pod.DeepCopy()
	probe.GenerateName, probe.Name = pod.Name+"-", ""
	_, err = kube.CoreV1().Pods(pod.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if r := PodRefusal(err); r != "" {
		return StableRefusal(r, pod.Name), nil
	}
	if err != nil {
		return "", fmt.Errorf("dry-run create of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return "", nil
}

// PodDryRun asks the API server whether it would create pod, as
// DryRunCreatePod does with a clientset: the server's words (StableRefusal)
// when it refuses the pod for good, an error for anything a retry may fix.
type PodDryRun func(ctx context.Context, pod *corev1.Pod) (refused string, err error)

// DryRunReplacePod is DryRunCreatePod of pod, which is to replace old (the
// live pod of the same name, nil when there is none), with one allowance
// (ReplaceRefusal).
func DryRunReplacePod(ctx context.Context, kube kubernetes.Interface, pod, old *corev1.Pod) (refused string, err error) {
	return ReplaceRefusal(ctx, func(ctx context.Context, p *corev1.Pod) (string, error) {
		return DryRunCreatePod(ctx, kube, p)
	}, pod, old)
}

// ReplaceRefusal is dryRun of pod, which is to replace old (nil when there
// is none), with one allowance: a ResourceQuota's "exceeded quota" is not a
// refusal when a copy of old is refused in the same words (the same
// quotas, the same amounts requested). The dry run counts old, which the
// replacement deletes first, so in a namespace whose quota is full to the
// pod (pods: N for N sandboxes) every replacement would be refused. A pod
// that asks for more than old, or an old pod the quota no longer counts (it
// ended), gets no allowance. pod and old must have the same name, so that
// their refusals, made stable (StableRefusal), can be compared word for
// word. This is the one rule for a replacement in a full quota: an ops
// replacing a sandbox's pod (DryRunReplacePod) and a SandboxSet's pool
// replacing an outdated member (old: a pod from the member's template) ask
// it.
func ReplaceRefusal(ctx context.Context, dryRun PodDryRun, pod, old *corev1.Pod) (refused string, err error) {
	refused, err = dryRun(ctx, pod)
	if err != nil || old == nil || !QuotaExceeded(refused) ||
		old.Status.Phase == corev1.PodSucceeded || old.Status.Phase == corev1.PodFailed {
		return refused, err
	}
	again := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: old.Name, Namespace: old.Namespace, Labels: old.Labels, Annotations: old.Annotations},
		Spec:       *old.Spec.DeepCopy(),
	}
	again.Spec.NodeName = ""
	before, err := dryRun(ctx, again)
	if err != nil {
		return "", err
	}
	if before == refused {
		klog.FromContext(ctx).Info("A ResourceQuota refuses a copy of the old pod too: the namespace is full, and deleting the old pod makes room for the new one", "pod", klog.KObj(old), "cause", refused)
		return "", nil
	}
	return refused, nil
}

// PodRefusal returns the API server's message when err refuses a pod for
// good — Invalid, BadRequest, RequestEntityTooLarge, or Forbidden by
// admission, quota or pod security — and "" otherwise. A Forbidden that is
// the caller's own RBAC (it may not create pods) is not the pod's fault:
// fixing the service's permissions mends it, so it is "" too.
func PodRefusal(err error) string {
	switch {
	case err == nil:
		return ""
	case IsRBACDenial(err):
		return ""
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err):
		return err.Error()
	}
	return ""
}

// StableRefusal is refused, a dry run's refusal of a pod named after name,
// without what changes from one call to the next: the name the server
// generated for the probe, and a ResourceQuota's "used" amounts.
func StableRefusal(refused, name string) string {
	return withoutVolatile(refused, name+"-", name)
}

// withoutVolatile is msg, an API server's refusal of an object created with
// generateName base, with the generated name (quoted) replaced by as and a
// ResourceQuota's "used" amounts left out: the words stay the same from one
// try to the next, so what records them is not rewritten on every retry.
func withoutVolatile(msg, base, as string) string {
	generated := regexp.MustCompile(`"` + GeneratedNamePattern(base) + `"`)
	msg = generated.ReplaceAllLiteralString(msg, `"`+as+`"`)
	return quotaUsed.ReplaceAllString(msg, ", limited: ")
}

// maxGeneratedBase is how much of a generateName the API server keeps before it adds
// its random suffix (k8s.io/apiserver's names.SimpleNameGenerator).
const maxGeneratedBase = 58

// GeneratedNamePattern is a regular expression matching the names the API server
// generates from generateName base.
func GeneratedNamePattern(base string) string {
	if len(base) > maxGeneratedBase {
		base = base[:maxGeneratedBase]
	}
	return regexp.QuoteMeta(base) + `[a-z0-9]{5}`
}

// quotaExceeded matches the words of ResourceQuota admission refusing a
// pod that would take the namespace past a quota: a Forbidden, `pods
// "<name>" is forbidden: exceeded quota: <quota>, requested: ..., used: ...,
// limited: ...` (k8s.io/apiserver's resourcequota plugin).
var quotaExceeded = regexp.MustCompile(`^\S+( "[^"]*")? is forbidden: exceeded quota: `)

// QuotaExceeded reports whether refused, the API server's words for a pod
// (PodRefusal, DryRunCreatePod), is a ResourceQuota's "exceeded quota": the
// namespace has no room for the pod now. ResourceQuota admission runs after
// validation and every other admission check, webhooks included, so
// nothing else refuses such a pod. Any other refusal is not one: Invalid,
// Pod Security, a webhook (whatever its words), or a quota the pod does not
// satisfy ("failed quota: ...: must specify ...").
func QuotaExceeded(refused string) bool {
	return quotaExceeded.MatchString(refused)
}

// IsRBACDenial tells the authorizer's refusal of a create ("... cannot
// create resource "pods" ...", or of any other resource) from admission's. The OwnerReferencesPermissionEnforcement
// admission plugin's refusals are the caller's permissions too: it may not
// set finalizers on the owner (blockOwnerDeletion) or delete what it owns.
func IsRBACDenial(err error) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, `cannot create resource "`) ||
		strings.Contains(msg, "cannot set blockOwnerDeletion") ||
		strings.Contains(msg, "cannot set an ownerRef on a resource you can't delete")
}

// PodFrom is the pod a template would give the sandbox ns/name, as the
// patch check dry-runs it (selector; kubectl molt plan).
func PodFrom(ns, name string, tpl *corev1.PodTemplateSpec) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: tpl.Labels, Annotations: tpl.Annotations},
		Spec:       *tpl.Spec.DeepCopy(),
	}
}
