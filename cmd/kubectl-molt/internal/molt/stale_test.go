package molt

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func statusaggLeaseAt(ns, holder string, renewed *time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: statusaggLease}}
	l.Spec.HolderIdentity = &holder
	if renewed != nil {
		l.Spec.RenewTime = &metav1.MicroTime{Time: *renewed}
	}
	return l
}

// A Lease renewed within twice its duration says nothing; one renewed
// longer ago, or released, says no statusagg runs and how to start it.
func TestStaleLease(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *time.Time { t := now.Add(-ago); return &t }
	for _, tc := range []struct {
		name   string
		lease  *coordinationv1.Lease
		want   []string
		silent bool
	}{
		{"renewed", statusaggLeaseAt("molt-system", "statusagg-a", at(2*time.Second)), nil, true},
		{"leader change", statusaggLeaseAt("molt-system", "statusagg-a", at(25*time.Second)), nil, true},
		{"dead", statusaggLeaseAt("molt-system", "statusagg-a", at(95*time.Second)), []string{"no statusagg runs", "Lease molt-system/molt-statusagg was last renewed 1m35s ago, by statusagg-a", "not being updated", "kubectl get pods -n molt-system"}, false},
		{"just released", statusaggLeaseAt("kube-system", "", at(time.Second)), nil, true},
		{"released", statusaggLeaseAt("kube-system", "", at(10*time.Second)), []string{"no statusagg runs", "Lease kube-system/molt-statusagg has no holder", "make up"}, false},
	} {
		got := staleLease(tc.lease, now)
		if tc.silent != (got == "") {
			t.Errorf("%s: %q, want silent %v", tc.name, got, tc.silent)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tc.name, got, w)
			}
		}
	}
}

// The looker finds the Lease in the local stack's namespace when molt's
// has none, says nothing when there is none at all, and reads it at most
// every leaseLookEvery.
func TestLeaseLookerFindsTheLease(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	old := now.Add(-time.Minute)
	kube := fake.NewClientset(statusaggLeaseAt("kube-system", "statusagg-a", &old))
	l := &leaseLooker{kube: kube, namespaces: statusaggLeaseNamespaces}
	if got := l.look(context.Background(), now); !strings.Contains(got, "kube-system/molt-statusagg") {
		t.Fatalf("look = %q, want the local stack's Lease named", got)
	}
	gets := len(kube.Actions())
	l.look(context.Background(), now.Add(leaseLookEvery/2))
	if len(kube.Actions()) != gets {
		t.Errorf("read the Lease again within %s", leaseLookEvery)
	}
	none := &leaseLooker{kube: fake.NewClientset(), namespaces: statusaggLeaseNamespaces}
	if got := none.look(context.Background(), now); got != "" {
		t.Errorf("no Lease anywhere: %q, want nothing said", got)
	}
}
