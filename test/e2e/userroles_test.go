package e2e

import (
	"context"
	"testing"
	"time"

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
	// Authorization comes before the lookup: an ops that does not exist
	// answers Forbidden to whoever may not write statuses, NotFound to
	// whoever may.
	if _, err := as("alice").AgentsV1alpha1().SandboxUpdateOps(ns).UpdateStatus(ctx, ops, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("alice (edit) writing an ops's status: %v, want Forbidden (status is molt's)", err)
	}
}
