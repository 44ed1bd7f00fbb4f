package statusagg

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/api/meta"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// TestStreamOutageIsToldAfterItsGraceAndUntilNATSIsBack: a short reconnect
// says nothing; an outage of streamGrace or more is told once, with since
// when and the connection's last error, and is taken back when NATS is back.
func TestStreamOutageIsToldAfterItsGraceAndUntilNATSIsBack(t *testing.T) {
	h := streamHealth{cur: outage{server: "nats://127.0.0.1:4222"}}
	t0 := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	if h.observe(t0, nats.CONNECTED, nil) {
		t.Fatal("a connected stream changed what the ops say")
	}
	if h.observe(t0.Add(time.Second), nats.RECONNECTING, errors.New("connection refused")) {
		t.Fatal("told at once: a reconnect within the grace must say nothing")
	}
	if h.observe(t0.Add(5*time.Second), nats.CONNECTED, nil) {
		t.Fatal("a reconnect within the grace changed what the ops say")
	}
	if _, down := h.down(); down {
		t.Fatal("down after a short reconnect")
	}

	h.observe(t0.Add(10*time.Second), nats.RECONNECTING, errors.New("connection refused"))
	if h.observe(t0.Add(10*time.Second+streamGrace-time.Second), nats.RECONNECTING, nil) {
		t.Fatal("told before the grace passed")
	}
	if !h.observe(t0.Add(10*time.Second+streamGrace), nats.RECONNECTING, nil) {
		t.Fatal("not told once the grace passed")
	}
	if h.observe(t0.Add(11*time.Second+streamGrace), nats.RECONNECTING, nil) {
		t.Fatal("told again during the same outage")
	}
	o, down := h.down()
	if !down || !o.since.Equal(t0.Add(10*time.Second)) || o.lastErr == nil {
		t.Fatalf("down() = %+v, %v; want since %s with the last error kept", o, down, t0.Add(10*time.Second))
	}

	var st agentsv1alpha1.SandboxUpdateOpsStatus
	st.Phase = agentsv1alpha1.SandboxUpdateOpsUpdating
	withStreamOutage(&st, o, down, 3)
	c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionEventStreamUnavailable)
	if c == nil || c.Reason != agentsv1alpha1.EventStreamReasonNATSUnreachable || c.ObservedGeneration != 3 {
		t.Fatalf("condition %+v, want EventStreamUnavailable NATSUnreachable of generation 3", c)
	}
	for _, want := range []string{"nats://127.0.0.1:4222", "2026-12-07T17:00:10Z", "RECONNECTING", "connection refused", "no sandbox moves on", "make status", "kubectl get pods -n molt-system"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q does not say %q", c.Message, want)
		}
	}

	ended := st
	ended.Conditions = append(ended.Conditions[:0:0], st.Conditions...)
	ended.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
	withStreamOutage(&ended, o, down, 3)
	if meta.FindStatusCondition(ended.Conditions, agentsv1alpha1.ConditionEventStreamUnavailable) != nil {
		t.Error("an ops that ended keeps EventStreamUnavailable")
	}

	if !h.observe(t0.Add(time.Minute), nats.CONNECTED, nil) {
		t.Fatal("NATS back: the ops were not told")
	}
	o, down = h.down()
	withStreamOutage(&st, o, down, 3)
	if meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionEventStreamUnavailable) != nil {
		t.Error("EventStreamUnavailable kept after NATS is back")
	}
}
