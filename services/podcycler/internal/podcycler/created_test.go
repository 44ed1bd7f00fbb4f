package podcycler

import (
	"testing"
	"time"
)

func TestCreatedPodsHoldsBackUntilSeenOrExpired(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var c createdPods

	if got := c.pending("ns/a", "uid-1", t0); got != 0 {
		t.Fatalf("pending with nothing created = %v, want 0", got)
	}

	c.expect("ns/a", "uid-1", t0)
	if got := c.pending("ns/a", "uid-1", t0.Add(time.Second)); got != createdPodTTL-time.Second {
		t.Errorf("pending 1s after the create = %v, want %v", got, createdPodTTL-time.Second)
	}
	if got := c.pending("ns/b", "uid-1", t0); got != 0 {
		t.Errorf("pending of another sandbox = %v, want 0", got)
	}

	// The informer reports the pod: nothing to wait for any more.
	c.forget("ns/a")
	if got := c.pending("ns/a", "uid-1", t0.Add(time.Second)); got != 0 {
		t.Errorf("pending after the pod was seen = %v, want 0", got)
	}

	// A pod the cache never shows is created again once the entry runs out.
	c.expect("ns/a", "uid-1", t0)
	if got := c.pending("ns/a", "uid-1", t0.Add(createdPodTTL)); got != 0 {
		t.Errorf("pending at the TTL = %v, want 0", got)
	}
	if _, ok := c.m["ns/a"]; ok {
		t.Errorf("an entry that ran out is kept")
	}

	// A sandbox created again under the same name does not wait for its predecessor's pod.
	c.expect("ns/a", "uid-1", t0)
	if got := c.pending("ns/a", "uid-2", t0.Add(time.Second)); got != 0 {
		t.Errorf("pending for a new sandbox of the same name = %v, want 0", got)
	}
	if got := c.pending("ns/a", "uid-1", t0.Add(time.Second)); got != 0 {
		t.Errorf("the predecessor's entry survived a look by the new sandbox: pending = %v", got)
	}
}
