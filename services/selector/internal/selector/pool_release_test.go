package selector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	typedv1alpha1 "molt.dev/pkg/generated/clientset/versioned/typed/agents/v1alpha1"
)

// TestPoolReleasesALabelClaimedMember: a member labelled
// sandbox-claimed=true while it still carries its set's owner reference (a
// claim written in two steps, or by hand) loses that reference, so that
// deleting the set does not have the garbage collector delete a user's
// sandbox; unclaimed members keep theirs. A second release from the stale
// copy writes nothing. Then the set is deleted: the garbage collector
// removes its members and leaves the claimed sandbox.
func TestPoolReleasesALabelClaimedMember(t *testing.T) {
	f := newFixture(t)
	f.startSelector()
	ctx := context.Background()
	sandboxes := f.agents.AgentsV1alpha1().Sandboxes(f.ns)
	set, members := f.warmPool(2)
	owned := func(sb *agentsv1alpha1.Sandbox) bool { return ownerIndex(sb, set.UID) >= 0 }

	// Claimed by the label alone: the owner reference is left in place.
	claimedName := members[0].Name
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{agentsv1alpha1.LabelSandboxClaimed: "true"}}})
	if err != nil {
		t.Fatal(err)
	}
	labelled, err := sandboxes.Patch(ctx, claimedName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !owned(labelled) {
		t.Fatalf("sandbox %s lost its owner reference with the label: this test shows nothing", claimedName)
	}
	testenv.Eventually(t, 30*time.Second, "the claimed sandbox loses the set's owner reference", func() (bool, error) {
		sb, err := sandboxes.Get(ctx, claimedName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return !owned(sb), fmt.Errorf("owner references %+v", sb.OwnerReferences)
	})
	claimed, err := sandboxes.Get(ctx, claimedName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claimed.Labels[agentsv1alpha1.LabelSandboxClaimed] != "true" || claimed.Labels[agentsv1alpha1.LabelSandboxPool] != set.Name {
		t.Errorf("claimed sandbox labels %v, want them as they were", claimed.Labels)
	}
	testenv.Eventually(t, 30*time.Second, "the pool refills to 2 members, each owned by the set", func() (bool, error) {
		list, err := sandboxes.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for i := range list.Items {
			sb := &list.Items[i]
			if sb.Name == claimedName {
				continue
			}
			if !owned(sb) {
				return false, fmt.Errorf("unclaimed sandbox %s has no owner reference to the set", sb.Name)
			}
			n++
		}
		return n == 2, fmt.Errorf("%d members", n)
	})

	// The same release again, from the copy read before it: a test fails,
	// nothing is written, and the set is looked at again.
	requeued := false
	again := &pool{client: f.agents, enqueueAfter: func(string, time.Duration) { requeued = true }}
	if _, err := again.release(ctx, set, labelled, ownerIndex(labelled, set.UID)); err != nil || !requeued {
		t.Errorf("a repeated release: err %v, looked again %v; want no error, looked again", err, requeued)
	}
	if sb, err := sandboxes.Get(ctx, claimedName, metav1.GetOptions{}); err != nil || sb.ResourceVersion != claimed.ResourceVersion {
		t.Errorf("a repeated release wrote the sandbox (err %v)", err)
	}

	// Deleting the set: its members go with it, the claimed sandbox stays.
	if err := f.agents.AgentsV1alpha1().SandboxSets(f.ns).Delete(ctx, set.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the garbage collector deletes the members and not the claimed sandbox", func() (bool, error) {
		return onlySandbox(ctx, sandboxes, claimedName)
	})
	if _, err := sandboxes.Get(ctx, claimedName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Errorf("the claimed sandbox was deleted with its set")
	}
}

// TestDeletedPoolReleasesAClaimBeforeItGoes: the pool puts its finalizer on
// the set, so a set deleted while no selector runs (or before the pool has
// seen a claim written just before the delete) stays until the pool has
// released the sandboxes labelled claimed; only then does the garbage
// collector delete the members, and the claimed sandbox stays. Without the
// finalizer the set is gone at once and the claimed sandbox, still owned by
// it, is deleted with the pool.
func TestDeletedPoolReleasesAClaimBeforeItGoes(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sandboxes := f.agents.AgentsV1alpha1().Sandboxes(f.ns)
	sets := f.agents.AgentsV1alpha1().SandboxSets(f.ns)

	runCtx, stop := context.WithCancel(ctx)
	cfg := f.selectorConfig()
	exited := make(chan error, 1)
	go func() { exited <- Run(runCtx, cfg) }()
	set, members := f.warmPool(2)
	testenv.Eventually(t, 30*time.Second, "the set carries the pool's finalizer", func() (bool, error) {
		got, err := sets.Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return slices.Contains(got.Finalizers, agentsv1alpha1.FinalizerSandboxSetProtection), fmt.Errorf("finalizers %v", got.Finalizers)
	})
	stop()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("selector.Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the selector did not stop within 20s")
	}

	// While no selector runs: a claim by the label alone, then the delete.
	claimedName := members[0].Name
	patch := []byte(`{"metadata":{"labels":{"` + agentsv1alpha1.LabelSandboxClaimed + `":"true"}}}`)
	if _, err := sandboxes.Patch(ctx, claimedName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sets.Delete(ctx, set.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Consistently(t, 3*time.Second, "the deleted set waits for the pool, and the claimed sandbox stays", func() (bool, error) {
		if _, err := sets.Get(ctx, set.Name, metav1.GetOptions{}); err != nil {
			return false, fmt.Errorf("get the deleted set: %w", err)
		}
		_, err := sandboxes.Get(ctx, claimedName, metav1.GetOptions{})
		return err == nil, err
	})

	f.startSelector()
	testenv.Eventually(t, 60*time.Second, "the set goes, the garbage collector deletes the other member and not the claimed sandbox", func() (bool, error) {
		if _, err := sandboxes.Get(ctx, claimedName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			t.Fatalf("the claimed sandbox %s was deleted with its set", claimedName)
		}
		if _, err := sets.Get(ctx, set.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("the set is still there (err %v)", err)
		}
		return onlySandbox(ctx, sandboxes, claimedName)
	})
	if sb, err := sandboxes.Get(ctx, claimedName, metav1.GetOptions{}); err != nil || ownerIndex(sb, set.UID) >= 0 {
		t.Errorf("the claimed sandbox after the set went: err %v, still owned by it", err)
	}
}

// TestPoolLabelsAnOwnerClaimedMemberClaimed: a member claimed by removing its
// set's owner reference alone is labelled sandbox-claimed=true, so the CLAIMED
// column and the set's status.selector say it left the pool.
func TestPoolLabelsAnOwnerClaimedMemberClaimed(t *testing.T) {
	f := newFixture(t)
	f.startSelector()
	ctx := context.Background()
	sandboxes := f.agents.AgentsV1alpha1().Sandboxes(f.ns)
	_, members := f.warmPool(2)
	name := members[0].Name
	if _, err := sandboxes.Patch(ctx, name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/ownerReferences"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the released member labelled claimed", func() (bool, error) {
		sb, err := sandboxes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return sb.Labels[agentsv1alpha1.LabelSandboxClaimed] == "true", fmt.Errorf("labels %v", sb.Labels)
	})
	other, err := sandboxes.Get(ctx, members[1].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Labels[agentsv1alpha1.LabelSandboxClaimed] != "false" {
		t.Errorf("the member still owned is labelled %v, want sandbox-claimed=false", other.Labels)
	}
}

// warmPool creates SandboxSet "warm" of replicas members on oldImage and waits
// until the pool has created them; it returns the set and its members.
func (f *fixture) warmPool(replicas int32) (*agentsv1alpha1.SandboxSet, []agentsv1alpha1.Sandbox) {
	f.t.Helper()
	ctx := context.Background()
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: f.ns}}
	set.Spec.Replicas = replicas
	set.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: oldImage}}}}
	set, err := f.agents.AgentsV1alpha1().SandboxSets(f.ns).Create(ctx, set, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var members []agentsv1alpha1.Sandbox
	testenv.Eventually(f.t, 30*time.Second, fmt.Sprintf("the pool creates %d members", replicas), func() (bool, error) {
		list, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		members = list.Items
		return len(members) == int(replicas), fmt.Errorf("%d sandboxes", len(members))
	})
	return set, members
}

// onlySandbox reports whether name is the only sandbox sandboxes lists, and
// which there are when not.
func onlySandbox(ctx context.Context, sandboxes typedv1alpha1.SandboxInterface, name string) (bool, error) {
	list, err := sandboxes.List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	var names []string
	for _, sb := range list.Items {
		names = append(names, sb.Name)
	}
	return len(names) == 1 && names[0] == name, fmt.Errorf("sandboxes %v, want [%s]", names, name)
}
