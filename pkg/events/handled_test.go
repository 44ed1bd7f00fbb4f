package events

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// RequestHandled finds the patched or failed of the attempt and the sandbox
// (by UID: a sandbox deleted and created again under the name, which repeats
// attempt ids, is another), and only while statusagg's consumer has not
// consumed it: once consumed and not recorded, statusagg dropped it, and a
// request again is what recovers the attempt.
func TestRequestHandled(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, ctx, ConsumerStatusAgg, ConsumerConfig{})
	handled := func(name, uid string, attempt int) string {
		t.Helper()
		got, err := f.pub.RequestHandled(ctx, "ns", name, types.UID("uid-"+uidOf(name, uid)), fmt.Sprint(attempt))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := handled("a", "", 1); got != "" {
		t.Fatalf("nothing published: %q", got)
	}
	failed := testEvent(TypeFailed, "ns", "b", 1)
	failed.Data.Stage, failed.Data.Reason = "PreUpgrade", "PreUpgradeFailed"
	f.publish(t, ctx, testEvent(TypeRequested, "ns", "a", 1), testEvent(TypePatched, "ns", "a", 1), failed)
	if got := handled("a", "", 1); got != TypePatched {
		t.Errorf("patched of attempt 1 published: %q, want %q", got, TypePatched)
	}
	if got := handled("b", "", 1); got != TypeFailed {
		t.Errorf("failed of attempt 1 published: %q, want %q", got, TypeFailed)
	}
	if got := handled("a", "again", 1); got != "" {
		t.Errorf("a sandbox a created again, same attempt id: %q, want none", got)
	}
	if got := handled("a", "", 2); got != "" {
		t.Errorf("another attempt: %q, want none", got)
	}
	pending := func(name, uid string) string {
		t.Helper()
		got, err := f.pub.UnconsumedRequest(ctx, "ns", name, types.UID("uid-"+uidOf(name, uid)))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := pending("a", ""); got != "1" {
		t.Errorf("requested attempt 1 not consumed: UnconsumedRequest %q, want 1", got)
	}
	if got := pending("a", "again"); got != "" {
		t.Errorf("a sandbox a created again: UnconsumedRequest %q, want none", got)
	}
	if got := pending("b", ""); got != "" {
		t.Errorf("nothing requested for b: UnconsumedRequest %q, want none", got)
	}

	// statusagg consumes all three.
	var r recorder
	stop := f.consume(t, ctx, func(_ context.Context, m *Message) error { r.add(m); return nil })
	eventually(t, "statusagg's consumer to ack every message", func() bool { return r.len() == 3 && settled(t, ctx, f.cons) })
	stop()
	if got := handled("a", "", 1); got != "" {
		t.Errorf("patched consumed by statusagg: %q, want none (a request again recovers what it dropped)", got)
	}
	if got := pending("a", ""); got != "" {
		t.Errorf("requested consumed by statusagg: UnconsumedRequest %q, want none", got)
	}
	f.publish(t, ctx, testEvent(TypePatched, "ns", "a", 2))
	if got := handled("a", "", 2); got != TypePatched {
		t.Errorf("patched of attempt 2 published after: %q, want %q", got, TypePatched)
	}
}

// uidOf is testEvent's sandbox UID suffix for name, or another one.
func uidOf(name, other string) string {
	if other != "" {
		return name + "-" + other
	}
	return name
}
