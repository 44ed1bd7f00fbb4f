package podcycler

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestPodGoneWakesOnlyThatName(t *testing.T) {
	var g podGone
	a, stopA := g.wait("ns/a")
	defer stopA()
	b, stopB := g.wait("ns/b")
	defer stopB()
	g.handler().OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}})
	select {
	case <-a:
	case <-time.After(time.Second):
		t.Fatal("the wait for ns/a was not woken by its delete")
	}
	select {
	case <-b:
		t.Fatal("the wait for ns/b was woken by the delete of ns/a")
	default:
	}
	stopB()
	if len(g.m) != 0 {
		t.Errorf("waits left after both ended: %v", g.m)
	}
	g.deleted("ns/b") // nobody waits: nothing to wake, no panic on a closed channel
}

func TestPodGoneRemembersWhenThePodWent(t *testing.T) {
	deletedAt := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	later := deletedAt.Add(5 * time.Second)
	g := podGone{now: func() time.Time { return deletedAt }}
	sb := &metav1.ObjectMeta{Name: "a", UID: "sb-a"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, sandboxKind)}}}
	g.handler().OnDelete(pod)
	if got := g.missingSince("ns/a", later); !got.Equal(deletedAt) {
		t.Fatalf("missingSince after the delete = %s, want the delete's time %s", got, deletedAt)
	}
	// A name whose delete this process did not see is missing since it first asked.
	if got := g.missingSince("ns/b", later); !got.Equal(later) {
		t.Errorf("missingSince of an unseen delete = %s, want the first ask %s", got, later)
	}
	if got := g.missingSince("ns/b", later.Add(3*time.Second)); !got.Equal(later) {
		t.Errorf("missingSince asked again = %s, want the first ask %s", got, later)
	}
	g.handler().OnAdd(pod, false)
	if back := later.Add(time.Minute); !g.missingSince("ns/a", back).Equal(back) {
		t.Errorf("missingSince after the pod came back kept the old delete (%s)", g.seen["ns/a"])
	}
	g.handler().OnDelete(pod)
	g.forget("ns/a")
	g.forget("ns/b")
	if len(g.seen) != 0 {
		t.Errorf("deletes remembered after forget: %v", g.seen)
	}
}

// A relist that finds the name taken by a pod of a new UID reports an update,
// not a delete; the wait for the old pod to go must still wake.
func TestPodGoneWakesWhenThePodIsReplaced(t *testing.T) {
	g := podGone{}
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "old"}}
	ch, stop := g.wait("ns/a")
	defer stop()
	g.handler().OnUpdate(old, old.DeepCopy()) // same pod, new status: no wake
	select {
	case <-ch:
		t.Fatal("an update of the same pod woke the wait")
	default:
	}
	g.missingSince("ns/a", time.Now())
	cur := old.DeepCopy()
	cur.UID = "new"
	g.handler().OnUpdate(old, cur)
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("the wait was not woken when a pod of a new UID took the name")
	}
	if _, ok := g.seen["ns/a"]; ok {
		t.Error("the name is remembered as missing although a pod holds it again")
	}
}

// The informer also shows pods that are no sandbox's (a Deployment's carry
// pod-template-hash too): their deletes wake a wait for the name but are not
// remembered, since no sandbox's sync would ever forget them.
func TestPodGoneRemembersOnlySandboxPods(t *testing.T) {
	var g podGone
	ch, stop := g.wait("ns/web-7d4b9-x2x1z")
	defer stop()
	rs := &metav1.ObjectMeta{Name: "web-7d4b9", UID: "rs"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-7d4b9-x2x1z",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}}}
	g.handler().OnDelete(pod)
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("the wait for the name was not woken by its delete")
	}
	if len(g.seen) != 0 {
		t.Errorf("a ReplicaSet's pod delete is remembered: %v", g.seen)
	}
}
