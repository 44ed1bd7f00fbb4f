package upgrade

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestQuotaExceeded: only ResourceQuota's "exceeded quota" Forbidden is a
// full namespace; every other refusal is about the pod.
func TestQuotaExceeded(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	forbidden := func(name, why string) error { return apierrors.NewForbidden(pods, name, errors.New(why)) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "pod count quota", err: forbidden("warm-x7k2p", "exceeded quota: pods, requested: pods=1, used: pods=10, limited: pods=10"), want: true},
		{name: "cpu quota, no name", err: forbidden("", "exceeded quota: compute, requested: requests.cpu=2, used: requests.cpu=9, limited: requests.cpu=10"), want: true},
		{name: "pod lacks what a quota needs", err: forbidden("warm-x7k2p", "failed quota: compute: must specify limits.cpu for: sandbox")},
		{name: "pod security", err: forbidden("warm-x7k2p", `violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false`)},
		{name: "webhook quoting a quota", err: forbidden("warm-x7k2p", `admission webhook "policy.example" denied the request: pods "x" is forbidden: exceeded quota: fake`)},
		{name: "invalid", err: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "warm-x7k2p", field.ErrorList{field.Invalid(field.NewPath("spec", "containers").Index(0).Child("image"), "", "exceeded quota: no")})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refused := PodRefusal(tt.err)
			if refused == "" {
				t.Fatalf("PodRefusal(%v) = \"\", want a refusal", tt.err)
			}
			if got := QuotaExceeded(refused); got != tt.want {
				t.Errorf("QuotaExceeded(%q) = %v, want %v", refused, got, tt.want)
			}
		})
	}
}

// A refusal reads the same from one dry run to the next while its cause
// does: the probe's generated name and the quota's used amounts are left
// out, and QuotaExceeded still recognises it.
func TestStableRefusal(t *testing.T) {
	a := StableRefusal(`pods "warm-x7k2p" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=4, limited: pods=4`, "warm")
	b := StableRefusal(`pods "warm-q9zz1" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=5, limited: pods=4`, "warm")
	if a != b || a != `pods "warm" is forbidden: exceeded quota: pods, requested: pods=1, limited: pods=4` {
		t.Errorf("StableRefusal = %q and %q, want one stable message", a, b)
	}
	if !QuotaExceeded(a) {
		t.Errorf("QuotaExceeded(%q) = false", a)
	}
	other := `pods "warmer-x7k2p" is forbidden: violates PodSecurity "restricted:latest"`
	if got := StableRefusal(other, "warm"); got != other {
		t.Errorf("StableRefusal changed another pod's name: %q", got)
	}
}

// The API server keeps 58 characters of a generateName: a long name's
// refusal is made stable all the same.
func TestStableRefusalOfALongName(t *testing.T) {
	name := strings.Repeat("a", 60)
	generated := (name + "-")[:58] + "x7k2p" // 58 characters of "name-", then the suffix
	got := StableRefusal(`pods "`+generated+`" is forbidden: violates PodSecurity "restricted:latest"`, name)
	if want := `pods "` + name + `" is forbidden: violates PodSecurity "restricted:latest"`; got != want {
		t.Errorf("StableRefusal = %q, want %q", got, want)
	}
}

// The caller's own permissions refusing a pod create — RBAC, or the
// OwnerReferencesPermissionEnforcement plugin's owner checks — are not the
// pod's fault: PodRefusal gives "" (fix the service's RBAC), not a refusal
// that would fail the sandbox as if its template were wrong.
func TestPodRefusalLeavesOutTheCallersPermissions(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	forbidden := func(why string) error { return apierrors.NewForbidden(pods, "box-0", errors.New(why)) }
	for _, err := range []error{
		forbidden(`User "system:serviceaccount:molt-system:podcycler" cannot create resource "pods" in API group "" in the namespace "demo"`),
		forbidden(`cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: User "system:serviceaccount:molt-system:podcycler" cannot update resource "sandboxes/finalizers"`),
		forbidden(`cannot set an ownerRef on a resource you can't delete: User "x" cannot delete resource "pods"`),
	} {
		if got := PodRefusal(err); got != "" {
			t.Errorf("PodRefusal(%v) = %q, want \"\" (the caller's permissions)", err, got)
		}
	}
	if got := PodRefusal(forbidden(`violates PodSecurity "restricted:latest": privileged`)); got == "" {
		t.Error("PodRefusal of a Pod Security refusal = \"\", want the refusal")
	}
}

// TestIsRBACDenial: the authorizer's refusal of a create, of a pod (the
// selector's dry run) or an ops (kubectl molt plan's), and the owner
// reference plugin's, are the caller's permissions; admission's refusals of
// the object and other errors are not.
func TestIsRBACDenial(t *testing.T) {
	forbidden := func(resource, why string) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: "agents.kruise.io", Resource: resource}, "x", errors.New(why))
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"pod create", forbidden("pods", `User "u" cannot create resource "pods" in API group "" in the namespace "team-a"`), true},
		{"ops create", forbidden("sandboxupdateops", `User "u" cannot create resource "sandboxupdateops" in API group "agents.kruise.io" in the namespace "team-a"`), true},
		{"owner reference", forbidden("pods", "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on"), true},
		{"pod security", forbidden("pods", `violates PodSecurity "restricted:latest": privileged`), false},
		{"admission policy", forbidden("sandboxupdateops", `ValidatingAdmissionPolicy 'molt-one-active-ops' denied request`), false},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "x", field.ErrorList{field.Required(field.NewPath("spec"), "")}), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		if got := IsRBACDenial(tt.err); got != tt.want {
			t.Errorf("%s: IsRBACDenial(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
