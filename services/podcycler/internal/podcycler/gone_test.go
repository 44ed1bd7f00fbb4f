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
