package upgrade

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// TestPoolMembership: a sandbox is in its set's pool while the set controls
// it and it is not labelled claimed; the label alone, or the owner reference
// removed alone, takes it out (a claim written in two steps).
func TestPoolMembership(t *testing.T) {
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "ns", UID: "set-uid"}}
	owned := []metav1.OwnerReference{*metav1.NewControllerRef(set, agentsv1alpha1.SchemeGroupVersion.WithKind("SandboxSet"))}
	now := metav1.Now()
	tests := []struct {
		name     string
		claimed  string // the sandbox-claimed label, "" for none
		refs     []metav1.OwnerReference
		deleting bool
		other    bool // compared with another set of the same name
		wantPool bool
		want     bool
	}{
		{name: "unclaimed member", claimed: "false", refs: owned, wantPool: true, want: true},
		{name: "no claimed label, controlled", refs: owned, wantPool: true, want: true},
		{name: "labelled claimed, still controlled", claimed: "true", refs: owned},
		{name: "owner reference removed, label not yet", claimed: "false"},
		{name: "claimed both ways", claimed: "true"},
		{name: "being deleted", claimed: "false", refs: owned, deleting: true, wantPool: true},
		{name: "another set's member", claimed: "false", refs: owned, other: true, wantPool: true},
		{name: "controlled by something else", claimed: "false",
			refs: []metav1.OwnerReference{*metav1.NewControllerRef(set, agentsv1alpha1.SchemeGroupVersion.WithKind("SandboxUpdateOps"))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "warm-abcde", Namespace: "ns", Labels: map[string]string{}, OwnerReferences: tt.refs}}
			if tt.claimed != "" {
				sb.Labels[agentsv1alpha1.LabelSandboxClaimed] = tt.claimed
			}
			if tt.deleting {
				sb.DeletionTimestamp = &now
			}
			if got := PoolOf(sb) != nil; got != tt.wantPool {
				t.Errorf("in a pool = %v, want %v", got, tt.wantPool)
			}
			of := set
			if tt.other {
				of = &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "ns", UID: "re-created"}}
			}
			if got := IsPoolMember(sb, of); got != tt.want {
				t.Errorf("IsPoolMember = %v, want %v", got, tt.want)
			}
		})
	}
}
