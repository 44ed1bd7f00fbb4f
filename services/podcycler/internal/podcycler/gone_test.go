package podcycler

import (
	"testing"
	"time"

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

func TestPodGoneRemembersTheDeleteUntilThePodIsBack(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	g := podGone{now: func() time.Time { return at }}
	if got := g.at("ns/a"); !got.IsZero() {
		t.Fatalf("at before any delete = %s, want zero", got)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	g.handler().OnDelete(pod)
	if got := g.at("ns/a"); !got.Equal(at) {
		t.Fatalf("at after the delete = %s, want %s", got, at)
	}
	if got := g.at("ns/b"); !got.IsZero() {
		t.Errorf("at of another name = %s, want zero", got)
	}
	g.handler().OnAdd(pod, false)
	if got := g.at("ns/a"); !got.IsZero() {
		t.Errorf("at after the pod came back = %s, want zero", got)
	}
	g.handler().OnDelete(pod)
	g.forget("ns/a")
	if len(g.seen) != 0 {
		t.Errorf("deletes remembered after forget: %v", g.seen)
	}
}
