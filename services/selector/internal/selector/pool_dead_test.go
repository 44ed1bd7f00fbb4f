package selector

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/generated/clientset/versioned/fake"
	listers "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

const failed = agentsv1alpha1.SandboxFailed

func TestPlanDead(t *testing.T) {
	tests := []struct {
		name       string
		dead       []*agentsv1alpha1.Sandbox
		recent     int
		held       bool
		wantRemove []string
		wantKeep   []string
	}{
		{
			name:       "first deaths of the revision: replaced",
			dead:       []*agentsv1alpha1.Sandbox{member("a", "r2", failed), member("b", "r2", agentsv1alpha1.SandboxSucceeded)},
			wantRemove: []string{"a", "b"},
		},
		{
			name:       "the threshold reached within the sync: the rest kept",
			dead:       members("d", 3, "r2", failed),
			recent:     deadReplaced - 1,
			wantRemove: []string{"d-0"},
			wantKeep:   []string{"d-1", "d-2"},
		},
		{
			name:     "threshold used up: kept",
			dead:     []*agentsv1alpha1.Sandbox{member("a", "r2", failed)},
			recent:   deadReplaced,
			wantKeep: []string{"a"},
		},
		{
			name:     "recorded as kept (a selector restarted, its count lost): kept",
			dead:     []*agentsv1alpha1.Sandbox{member("a", "r2", failed)},
			held:     true,
			wantKeep: []string{"a"},
		},
		{
			name:       "dead members of another revision: deleted as before, whatever the count",
			dead:       []*agentsv1alpha1.Sandbox{member("old", "r1", failed), member("new", "r2", failed)},
			recent:     deadReplaced,
			held:       true,
			wantRemove: []string{"old"},
			wantKeep:   []string{"new"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			remove, keep := planDead(tt.dead, "r2", tt.recent, tt.held)
			if got := names(remove); !slices.Equal(got, tt.wantRemove) {
				t.Errorf("remove %v, want %v", got, tt.wantRemove)
			}
			if got := names(keep); !slices.Equal(got, tt.wantKeep) {
				t.Errorf("keep %v, want %v", got, tt.wantKeep)
			}
		})
	}
}

// A set whose members of the current revision keep dying: the pool deletes
// and replaces deadReplaced of them, then keeps the next one (deleting and
// creating nothing) and records it on the set; a restarted selector, whose
// count is lost, keeps it too. The user deleting it resumes the pool (the
// record removed, a member created, the count started again); a new
// template removes the record too, and a dead member of the old revision
// is deleted as before.
func TestDeadMembersAreKeptAfterTheThreshold(t *testing.T) {
	set := warmSet("uid-1", "registry.example/agent:v1")
	set.Spec.Replicas = 2
	revision, err := upgrade.Revision(set.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	client := fake.NewSimpleClientset()
	n := 0
	client.PrependReactor("create", "sandboxes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		n++ // the tracker generates no names
		a.(clienttesting.CreateAction).GetObject().(*agentsv1alpha1.Sandbox).Name = "warm-new-" + string(rune('a'+n))
		return false, nil, nil
	})
	newPool := func() *checkPool {
		c := newCheckPool()
		c.client = client
		c.sandboxes = listers.NewSandboxLister(indexer)
		return c
	}
	add := func(sb *agentsv1alpha1.Sandbox) *agentsv1alpha1.Sandbox {
		sb.Namespace = "team-a"
		sb.Labels[agentsv1alpha1.LabelSandboxPool] = set.Name
		sb.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(set, agentsv1alpha1.SchemeGroupVersion.WithKind("SandboxSet"))}
		if err := indexer.Add(sb); err != nil {
			t.Fatal(err)
		}
		if err := client.Tracker().Add(sb); err != nil {
			t.Fatal(err)
		}
		return sb
	}
	writes := func() []string {
		var out []string
		for _, a := range client.Actions() {
			switch a := a.(type) {
			case clienttesting.DeleteAction:
				out = append(out, "delete "+a.GetName())
			case clienttesting.CreateAction:
				out = append(out, "create")
			}
		}
		client.ClearActions()
		return out
	}
	ctx := context.Background()
	c := newPool()
	sync := func(c *checkPool, what string, want ...string) {
		t.Helper()
		if err := c.reconcile(ctx, set, &expectation{}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := writes(); !slices.Equal(got, want) {
			t.Fatalf("%s: writes %v, want %v", what, got, want)
		}
	}
	add(member("warm-up", revision, running))
	for i := range deadReplaced {
		sb := member("warm-dead-"+string(rune('0'+i)), revision, failed)
		add(sb)
		sync(c, "death "+sb.Name, "delete "+sb.Name, "create")
		if err := indexer.Delete(sb); err != nil {
			t.Fatal(err)
		}
	}
	kept := member("warm-dead-x", revision, failed)
	kept.Status.Conditions = []metav1.Condition{{Type: agentsv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "PodNotReady",
		Message: "pod warm-dead-x has failed; container sandbox exited with code 1 (Error)"}}
	add(kept)
	sync(c, "a death past the threshold")
	why := upgrade.MembersFailing(set, revision)
	for _, want := range []string{"warm-dead-x: pod warm-dead-x has failed; container sandbox exited with code 1", "the pool keeps the next dead ones"} {
		if !strings.Contains(why, want) {
			t.Errorf("recorded %q, want it to say %q", why, want)
		}
	}
	c.others = nil
	sync(c, "the same again")
	if len(c.others) != 0 {
		t.Errorf("the same record written again: %v", c.others)
	}

	sync(newPool(), "a restarted selector")

	if err := indexer.Delete(kept); err != nil {
		t.Fatal(err)
	}
	sync(c, "the kept member deleted by the user", "create")
	if v, ok := set.Annotations[upgrade.AnnotationMembersFailing]; ok {
		t.Errorf("record %q kept after the dead members were deleted", v)
	}
	again := add(member("warm-dead-y", revision, failed))
	sync(c, "a death after the pool resumed", "delete "+again.Name, "create")
	if err := indexer.Delete(again); err != nil {
		t.Fatal(err)
	}

	// Used up again, then a new template: the record goes, the dead
	// member of the old revision is deleted.
	for i := range deadReplaced {
		sb := add(member("warm-dead-z"+string(rune('0'+i)), revision, failed))
		want := []string{"delete " + sb.Name, "create"}
		if i == deadReplaced-1 {
			want = nil // warm-dead-y counted
		}
		sync(c, "death "+sb.Name, want...)
		if want != nil {
			if err := indexer.Delete(sb); err != nil {
				t.Fatal(err)
			}
		}
	}
	if upgrade.MembersFailing(set, revision) == "" {
		t.Fatal("no record after the threshold was used up again")
	}
	set.Spec.Template.Spec.Containers[0].Image = "registry.example/agent:v2"
	got := func() []string { _ = c.reconcile(ctx, set, &expectation{}); return writes() }()
	if !slices.Contains(got, "delete warm-dead-z2") {
		t.Errorf("new template: writes %v, want the old revision's dead member deleted", got)
	}
	if v, ok := set.Annotations[upgrade.AnnotationMembersFailing]; ok {
		t.Errorf("record %q kept after the template changed", v)
	}
	gone := member("warm-dead-z2", revision, failed)
	gone.Namespace = "team-a"
	if err := indexer.Delete(gone); err != nil {
		t.Fatal(err)
	}

	// The new revision's members die too, past the threshold: kept. Kept
	// for a whole period (an eviction that passed, a registry back up), the
	// pool tries again: it replaces the kept member, and the record goes.
	v2, err := upgrade.Revision(set.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	for i := range deadReplaced {
		sb := add(member("warm-v2-dead-"+string(rune('0'+i)), v2, failed))
		_ = c.reconcile(ctx, set, &expectation{})
		writes()
		if err := indexer.Delete(sb); err != nil {
			t.Fatal(err)
		}
	}
	last := add(member("warm-v2-dead-x", v2, failed))
	sync(c, "a death past the threshold, on the new revision")
	if upgrade.MembersFailing(set, v2) == "" {
		t.Fatal("no record of the new revision's kept member")
	}
	sync(c, "kept, before a whole period")
	key := set.Namespace + "/" + set.Name
	c.mu.Lock()
	d := c.deaths[key]
	d.heldSince = d.heldSince.Add(-upgrade.DeadMembersRetry)
	c.deaths[key] = d
	c.mu.Unlock()
	sync(c, "kept for a whole period", "delete "+last.Name, "create")
	if v, ok := set.Annotations[upgrade.AnnotationMembersFailing]; ok {
		t.Errorf("record %q kept after the kept member was replaced", v)
	}
}

// Deaths older than deadWindow are not counted, nor kept.
func TestDeathsRecent(t *testing.T) {
	now := time.Now()
	d := deaths{deleted: map[types.UID]time.Time{"old": now.Add(-deadWindow - time.Second), "new": now.Add(-time.Minute)}}
	if n := d.recent(now); n != 1 || len(d.deleted) != 1 {
		t.Errorf("recent %d, %d remembered; want 1, 1", n, len(d.deleted))
	}
}
