package upgrade

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestPodCreateErrorValueIsStableAcrossRetries(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	quota := func(used string) error {
		return apierrors.NewForbidden(pods, "box-0", errors.New("exceeded quota: team, requested: pods=1, used: "+used+", limited: pods=5"))
	}
	a, b := PodCreateErrorValue(quota("pods=5")), PodCreateErrorValue(quota("pods=5,requests.cpu=3"))
	if a != b {
		t.Errorf("values differ as the quota's use changes: %q, %q", a, b)
	}
	if want := `pods "box-0" is forbidden: exceeded quota: team, requested: pods=1, limited: pods=5`; a != want {
		t.Errorf("value = %q, want %q", a, want)
	}
	if !PodCreateRefused(quota("pods=5")) || !PodCreateRefused(apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "box-0", nil)) {
		t.Error("a Forbidden or Invalid create is a refusal")
	}
	if PodCreateRefused(apierrors.NewAlreadyExists(pods, "box-0")) || PodCreateRefused(apierrors.NewServiceUnavailable("busy")) {
		t.Error("AlreadyExists and a busy server are not refusals")
	}
}

// A refused member create reads the same from one retry to the next: the
// generated name and the wrapping are left out.
func TestMemberCreateErrorValueIsStable(t *testing.T) {
	refusal := func(name string) error {
		return fmt.Errorf("create a member of SandboxSet ns/warm: %w", apierrors.NewForbidden(schema.GroupResource{Group: "agents.kruise.io", Resource: "sandboxes"}, name, errors.New("denied by policy freeze")))
	}
	a, b := MemberCreateErrorValue(refusal("warm-b9ppj"), "warm"), MemberCreateErrorValue(refusal("warm-6n7wd"), "warm")
	if a != b || a != `sandboxes.agents.kruise.io "warm-…" is forbidden: denied by policy freeze` {
		t.Errorf("MemberCreateErrorValue = %q and %q, want one stable message", a, b)
	}
}
