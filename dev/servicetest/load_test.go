package servicetest

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/upgrade"
)

// TestLoadClaimedReadsAtLeastTheEventsVersion checks upgrade.LoadClaimed
// against the real API server: read at the resourceVersion an event carries
// it sees the write that version names (a claim, then its removal, then the
// sandbox's deletion), and a version the watch cache cannot reach falls back
// to a read from etcd instead of failing the stage.
func TestLoadClaimedReadsAtLeastTheEventsVersion(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	agents, err := versioned.NewForConfig(env.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	sandboxes := agents.AgentsV1alpha1().Sandboxes(ns)
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "load", Namespace: ns}}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.local/app:v1"}}}}
	sb, err = sandboxes.Create(ctx, sb, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	label := func(value string) string {
		t.Helper()
		patch := `{"metadata":{"labels":{"` + agentsv1alpha1.LabelUpdateOps + `":null}}}`
		if value != "" {
			patch = `{"metadata":{"labels":{"` + agentsv1alpha1.LabelUpdateOps + `":"` + value + `"}}}`
		}
		written, err := sandboxes.Patch(ctx, sb.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("label sandbox: %v", err)
		}
		return written.ResourceVersion
	}

	claimed := label("ops-a")
	got, skip, err := upgrade.LoadClaimed(ctx, agents, ns, sb.Name, sb.UID, "ops-a", "uid-a", claimed)
	if err != nil || got == nil || got.Labels[agentsv1alpha1.LabelUpdateOps] != "ops-a" {
		t.Fatalf("LoadClaimed at the claim's version %s = %v, %q, %v; want the claimed sandbox", claimed, got, skip, err)
	}
	if v, _ := strconv.ParseUint(got.ResourceVersion, 10, 64); v < mustUint(t, claimed) {
		t.Errorf("LoadClaimed at %s returned the older version %s", claimed, got.ResourceVersion)
	}

	// A version far past anything written: the watch cache never reaches it,
	// so the read falls back to etcd (after the API server's wait for it).
	ahead := strconv.FormatUint(mustUint(t, claimed)+1_000_000_000, 10)
	start := time.Now()
	got, skip, err = upgrade.LoadClaimed(ctx, agents, ns, sb.Name, sb.UID, "ops-a", "uid-a", ahead)
	if err != nil || got == nil {
		t.Fatalf("LoadClaimed at the unreachable version %s = %v, %q, %v; want the fallback read from etcd to return the sandbox", ahead, got, skip, err)
	}
	// A functional bound, not a speed target: client-go alone would retry the
	// cache's refusal for about 40s before the fallback.
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the fallback read took %s, want it soon after the cache's wait (about 4s)", took)
	}

	// ops-a deleted and applied again: the same name, another attempt. An
	// event of the first one, still queued, is stale.
	reclaim, err := sandboxes.Patch(ctx, sb.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+upgrade.AnnotationClaim+`":"ops-a uid-b"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("claim for uid-b: %v", err)
	}
	if got, skip, err = upgrade.LoadClaimed(ctx, agents, ns, sb.Name, sb.UID, "ops-a", "uid-a", reclaim.ResourceVersion); err != nil || got != nil || skip == "" {
		t.Errorf("LoadClaimed for attempt uid-a of a sandbox claimed by attempt uid-b of ops-a = %v, %q, %v; want a skip", got, skip, err)
	}
	if got, skip, err = upgrade.LoadClaimed(ctx, agents, ns, sb.Name, sb.UID, "ops-a", "uid-b", reclaim.ResourceVersion); err != nil || got == nil {
		t.Errorf("LoadClaimed for the claiming attempt uid-b = %v, %q, %v; want the sandbox", got, skip, err)
	}

	released := label("")
	if got, skip, err = upgrade.LoadClaimed(ctx, agents, ns, sb.Name, sb.UID, "ops-a", "uid-a", released); err != nil || got != nil || skip == "" {
		t.Errorf("LoadClaimed at the release's version %s = %v, %q, %v; want a skip: no longer claimed", released, got, skip, err)
	}
	if got, skip, err = upgrade.LoadClaimed(ctx, agents, ns, sb.Name, "another-uid", "", "", released); err != nil || got != nil || skip == "" {
		t.Errorf("LoadClaimed of another uid = %v, %q, %v; want a skip: recreated", got, skip, err)
	}

	if err := sandboxes.Delete(ctx, sb.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete sandbox: %v", err)
	}
	if got, skip, err = upgrade.LoadClaimed(ctx, agents, ns, sb.Name, sb.UID, "", "", ""); err != nil || got != nil || skip != "sandbox is gone" {
		t.Errorf("LoadClaimed after the delete = %v, %q, %v; want a skip: sandbox is gone", got, skip, err)
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", s, err)
	}
	return v
}
