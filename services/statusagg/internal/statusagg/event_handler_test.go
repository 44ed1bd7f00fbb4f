package statusagg

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/controller"
	"molt.dev/pkg/events"
	agentslisters "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// readSignal is a sandbox lister that says on read each time it is read.
type readSignal struct {
	agentslisters.SandboxLister
	read chan struct{}
}

func (r readSignal) Sandboxes(ns string) agentslisters.SandboxNamespaceLister {
	select {
	case r.read <- struct{}{}:
	default:
	}
	return r.SandboxLister.Sandboxes(ns)
}

// An event handled while a write of its sandbox is in flight is decided
// against the status as it is once that write is done and seen, never
// against a cached copy read before: here the write ends the attempt
// Succeeded, so a late pod-ready must change nothing (the integration test
// UpgradeProgressesAndOpsCompletes saw pod-ready begin the attempt again at
// PostUpgrade over Succeeded, and the sandbox stuck there).
func TestStageDecidesAgainstTheStatusAfterTheWriteInFlight(t *testing.T) {
	const attempt = "ops-uid"
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b2", UID: "sb-uid",
		Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "ops"}}}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := indexer.Add(sb); err != nil {
		t.Fatal(err)
	}
	lister := readSignal{SandboxLister: agentslisters.NewSandboxLister(indexer), read: make(chan struct{}, 1)}
	s := &server{
		sandboxes:  lister,
		ops:        agentslisters.NewSandboxUpdateOpsLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})),
		sandboxCtl: controller.New("test", func(context.Context, string) error { return nil }),
		coalesce:   time.Second,
	}
	ev := events.Event{Type: events.TypePodReady, Data: events.Data{Attempt: attempt, Ops: events.OpsRef{Name: "ops"},
		Sandbox: events.SandboxRef{Namespace: "ns", Name: "b2", UID: "sb-uid"}}}

	// The writer holds the sandbox's entry while the event arrives.
	key := ev.SandboxKey()
	e := s.writes.lock(key)
	type result struct {
		out outcome
		w   *waiter
		err error
	}
	res := make(chan result, 1)
	go func() {
		out, w, err := s.stage(context.Background(), ev, false)
		res <- result{out, w, err}
	}()
	// Give a read made before the lock (the old order) the chance to happen.
	select {
	case <-lister.read:
	case <-time.After(200 * time.Millisecond):
	}
	// The write ended the attempt, the informer shows it, and the entry was
	// dropped (syncSandbox does all three while holding it).
	succeeded := sb.DeepCopy()
	recordTransition(&succeeded.Status.Conditions, transition{Attempt: attempt, New: true, To: agentsv1alpha1.UpgradingReasonSucceeded}, 1, metav1.Now())
	if err := indexer.Update(succeeded); err != nil {
		t.Fatal(err)
	}
	s.writes.forget(key, e)
	e.mu.Unlock()

	r := <-res
	if r.err != nil {
		t.Fatalf("stage: %v", r.err)
	}
	if r.w != nil || r.out.skip == "" {
		t.Fatalf("pod-ready after Succeeded was decided as %+v (waiting for a write: %v); want a skip", r.out.tr, r.w != nil)
	}
	if reason, _ := upgrade.ReasonFor(succeeded, attempt); reason != agentsv1alpha1.UpgradingReasonSucceeded {
		t.Fatalf("test setup: reason %q", reason)
	}
}
