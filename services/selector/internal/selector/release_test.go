package selector

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	listers "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A deleted ops waits for a sandbox whose update-ops label was removed while
// its attempt is in a stage (the claim annotation still names the ops): the
// label selector of the release does not find it. Before, the finalizer went
// at once, and the sandbox drove an attempt of an ops that was gone, outside
// every budget, its claim annotation never removed. Its label is put back
// (podcycler reports a new pod only for a sandbox of the pod's ops); once the
// attempt ends, the release strips label and claim and lets the ops go.
func TestReleaseWaitsForASandboxThatLostItsLabel(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	ops := f.ops("upgrade", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Finalizers = []string{agentsv1alpha1.FinalizerSandboxUpdateOpsProtection}
	})
	sb := f.getSandbox("sbx-0")
	sb.Annotations = map[string]string{upgrade.AnnotationClaim: upgrade.ClaimValue(ops.Name, string(ops.UID))}
	if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Update(ctx, sb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.finish("sbx-0", ops, agentsv1alpha1.UpgradingReasonUpgradePod)

	client := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns)
	if err := client.Delete(ctx, ops.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	release := func() {
		t.Helper()
		deleting, err := client.Get(ctx, ops.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		if err := indexer.Add(f.getSandbox("sbx-0")); err != nil {
			t.Fatal(err)
		}
		s := &Selector{client: f.agents, sandboxLister: listers.NewSandboxLister(indexer), inflight: newInflight(),
			republishAfter: DefaultRepublishAfter, enqueueAfter: func(string, time.Duration) {}}
		if err := s.release(ctx, deleting); err != nil {
			t.Fatalf("release: %v", err)
		}
	}

	release()
	o, err := client.Get(ctx, ops.Name, metav1.GetOptions{})
	if err != nil || !slices.Contains(o.Finalizers, agentsv1alpha1.FinalizerSandboxUpdateOpsProtection) {
		t.Fatalf("ops after a release while its unlabelled sandbox is in UpgradePod: %v, err %v; want it kept, finalizer on", o, err)
	}
	if sb := f.getSandbox("sbx-0"); sb.Annotations[upgrade.AnnotationClaim] == "" || sb.Labels[agentsv1alpha1.LabelUpdateOps] != ops.Name {
		t.Errorf("sbx-0 while its attempt is in UpgradePod: claim %q, label %q; want the claim kept and the label put back (every stage drives it then)",
			sb.Annotations[upgrade.AnnotationClaim], sb.Labels[agentsv1alpha1.LabelUpdateOps])
	}

	f.finish("sbx-0", ops, agentsv1alpha1.UpgradingReasonSucceeded)
	release()
	if _, err := client.Get(ctx, ops.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ops after its unlabelled sandbox Succeeded: err %v, want it gone", err)
	}
	if v, ok := f.getSandbox("sbx-0").Annotations[upgrade.AnnotationClaim]; ok {
		t.Errorf("claim annotation %q left on the released sandbox", v)
	}
}
