package podcycler

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	agentsclient "molt.dev/pkg/generated/clientset/versioned"
	agentslisters "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A resume's template is already at the target revision (the failed attempt
// patched it), so the informer's copy from before the patcher's write for
// the new attempt looks current, but it lacks that write's CheckpointRestore
// mark: used, the old pod would be deleted without a checkpoint. The
// UpgradePod handler reads the sandbox at least at the version the event
// carries, and only a cache that has reached it is used as is.
func TestLoadSandboxReadsAtLeastThePatchersVersion(t *testing.T) {
	ctx := context.Background()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	client, err := agentsclient.NewForConfig(env.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	const attempt = "resume-uid"
	sandboxes := client.AgentsV1alpha1().Sandboxes(ns)
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sbx-resume", Namespace: ns,
		Labels:      map[string]string{agentsv1alpha1.LabelUpdateOps: "retry"},
		Annotations: map[string]string{upgrade.AnnotationClaim: upgrade.ClaimValue("retry", attempt)}}}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/sandbox:v2"}}}}
	before, err := sandboxes.Create(ctx, sb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The patcher's write for the resume: the template unchanged, the mark added.
	after := before.DeepCopy()
	after.Annotations[upgrade.AnnotationUpgradeStrategy] = upgrade.StrategyValue(attempt)
	if after, err = sandboxes.Update(ctx, after, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	revision, err := upgrade.Revision(after.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	d := events.Data{Ops: events.OpsRef{Name: "retry"}, Attempt: attempt,
		Sandbox:        events.SandboxRef{Namespace: ns, Name: sb.Name, UID: before.UID},
		TargetRevision: revision, SandboxResourceVersion: after.ResourceVersion}

	for _, tc := range []struct {
		name   string
		cached *agentsv1alpha1.Sandbox
	}{
		{name: "cache behind the patcher's write", cached: before},
		{name: "cache at the patcher's write", cached: after},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			if err := idx.Add(tc.cached); err != nil {
				t.Fatal(err)
			}
			c := &cycler{agents: client, sandboxes: agentslisters.NewSandboxLister(idx)}
			got, err := c.loadSandbox(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			if !upgrade.ChecksPoint(got, attempt) {
				t.Fatalf("loaded resourceVersion %s (event carries %s) without the CheckpointRestore mark: annotations %v",
					got.ResourceVersion, d.SandboxResourceVersion, got.Annotations)
			}
		})
	}
}
