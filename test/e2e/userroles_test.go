package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
)

// TestPeopleGetMoltKindsThroughEditAndView: deploy/'s aggregated roles give
// whoever has Kubernetes' `edit` in a namespace the right to apply a
// SandboxUpdateOps there, and whoever has `view` the right to read it but
// not to apply one: no one needs RBAC written for molt's kinds by hand.
func TestPeopleGetMoltKindsThroughEditAndView(t *testing.T) {
	s := Stack(t) // applies deploy/'s RBAC
	ctx := context.Background()
	ns := s.env.Namespace(t)
	for user, role := range map[string]string{"alice": "edit", "bob": "view"} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-" + role, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		if _, err := s.env.Kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	as := func(user string) versioned.Interface {
		cfg := rest.CopyConfig(s.env.RestConfig)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		c, err := versioned.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "by-a-person", Namespace: ns}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{poolLabel: "people"}}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	testenv.Eventually(t, time.Minute, "edit (aggregated) lets alice apply an ops", func() (bool, error) {
		_, err := as("alice").AgentsV1alpha1().SandboxUpdateOps(ns).Create(ctx, ops, dryRun)
		return err == nil, err
	})
	testenv.Eventually(t, time.Minute, "view (aggregated) lets bob read ops and sandboxes", func() (bool, error) {
		if _, err := as("bob").AgentsV1alpha1().SandboxUpdateOps(ns).List(ctx, metav1.ListOptions{}); err != nil {
			return false, err
		}
		_, err := as("bob").AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	if _, err := as("bob").AgentsV1alpha1().SandboxUpdateOps(ns).Create(ctx, ops, dryRun); !apierrors.IsForbidden(err) {
		t.Errorf("bob (view) applying an ops: %v, want Forbidden", err)
	}
	// Who may only look can still plan: the dry runs (of the ops, of the
	// patched pod) are creates, refused, and the plugin reads the file
	// itself instead, and says so.
	makeSandboxes(t, s, ns, "pp", 1, "people", nil)
	out, errOut, code := molt(t, "apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxUpdateOps\nmetadata: {name: by-bob}\nspec:\n  selector: {matchLabels: {"+poolLabel+": people}}\n  patch: {spec: {containers: [{name: main, image: img:v2}]}}\n",
		"plan", "-f", "-", "-n", ns, "--as=bob")
	if code != 0 || !strings.Contains(out, "Plan for SandboxUpdateOps "+ns+"/by-bob") || !strings.Contains(out, "you may not create SandboxUpdateOps in namespace "+ns) || !strings.Contains(out, "needs Kubernetes' edit role") ||
		!strings.Contains(out, "1 sandbox selected") || !strings.Contains(out, "the patched pod was not checked by the API server: you may not create pods") {
		t.Errorf("bob (view) planning an ops: exit %d\n%s\n%s", code, out, errOut)
	}
	// The size of a warm pool changes through its scale subresource
	// (kubectl scale sbs): edit may, view may only read it.
	for _, c := range []struct {
		user, verb string
		allowed    bool
	}{{"alice", "update", true}, {"alice", "patch", true}, {"bob", "get", true}, {"bob", "update", false}} {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: c.user, ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: c.verb, Group: agentsv1alpha1.GroupName, Resource: "sandboxsets", Subresource: "scale"}}}
		testenv.Eventually(t, time.Minute, fmt.Sprintf("%s may %s sandboxsets/scale: %v", c.user, c.verb, c.allowed), func() (bool, error) {
			got, err := s.env.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			return got.Status.Allowed == c.allowed, fmt.Errorf("allowed %v (%s)", got.Status.Allowed, got.Status.Reason)
		})
	}
	// Authorization comes before the lookup: an ops that does not exist
	// answers Forbidden to whoever may not write statuses, NotFound to
	// whoever may.
	if _, err := as("alice").AgentsV1alpha1().SandboxUpdateOps(ns).UpdateStatus(ctx, ops, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("alice (edit) writing an ops's status: %v, want Forbidden (status is molt's)", err)
	}
}
