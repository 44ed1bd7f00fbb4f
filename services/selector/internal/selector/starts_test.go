package selector

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// The first ops to admit in a namespace holds it against another the cache
// takes for active, until it ends or goes; ops of other namespaces are apart.
func TestStartsKeepTheFirstOpsToAdmit(t *testing.T) {
	op := func(ns, name string) *agentsv1alpha1.SandboxUpdateOps {
		return &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)}}
	}
	zeta, alpha, other := op("ns", "zeta"), op("ns", "alpha"), op("ns2", "alpha")
	all := []*agentsv1alpha1.SandboxUpdateOps{zeta, alpha}
	var st starts
	if got := st.take(zeta, all); got != "" {
		t.Fatalf("zeta, first: held by %q", got)
	}
	if got := st.take(alpha, all); got != "zeta" {
		t.Fatalf("alpha after zeta started: held by %q, want zeta", got)
	}
	if got := st.take(zeta, all); got != "" {
		t.Fatalf("zeta again: held by %q", got)
	}
	if got := st.take(other, []*agentsv1alpha1.SandboxUpdateOps{other}); got != "" {
		t.Fatalf("another namespace: held by %q", got)
	}
	zeta.Status.Phase = agentsv1alpha1.SandboxUpdateOpsCompleted
	if got := st.take(alpha, all); got != "" {
		t.Fatalf("alpha once zeta completed: held by %q", got)
	}
	if got := st.take(zeta, []*agentsv1alpha1.SandboxUpdateOps{zeta}); got != "" {
		t.Fatalf("zeta after alpha, alpha gone from the list: held by %q", got)
	}
}
