package hookrunner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	agentsfake "molt.dev/pkg/generated/clientset/versioned/fake"
)

// lastJS records what is published, and serves the last message of a subject
// from a stream that holds last (by subject).
type lastJS struct {
	recordingJS
	last map[string][]byte
}

func (j *lastJS) Stream(context.Context, string) (jetstream.Stream, error) {
	return &lastStream{last: j.last}, nil
}

type lastStream struct {
	jetstream.Stream
	last map[string][]byte
}

func (s *lastStream) GetLastMsgForSubject(_ context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	data, ok := s.last[subject]
	if !ok {
		return nil, jetstream.ErrMsgNotFound
	}
	return &jetstream.RawStreamMsg{Subject: subject, Sequence: 1, Data: data}, nil
}

// A patched redelivered after its prehook-done, once podcycler has deleted
// the old pod, is not filed as PreUpgradeFailed: statusagg could apply that
// failure before the prehook-done (another subject) and end the attempt
// behind its new pod. Without a prehook-done of the attempt in the stream
// (another attempt's does not count) the gone pod fails the step, as before.
func TestPreUpgradeOfAGonePodPassedOnAlreadyIsNotFailed(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "sb",
		Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "ops1"}}}
	sb.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/backup"}}}}
	d := events.Data{Ops: events.OpsRef{Name: "ops1", UID: "a1"}, Sandbox: events.SandboxRef{Namespace: "ns", Name: "box", UID: "sb"}, Attempt: "a1", OldPodUID: "p1"}
	done := func(attempt string) map[string][]byte {
		ev := events.Event{Type: events.TypePreHookDone, Data: d, ID: "id-" + attempt, Source: "hookrunner", Time: time.Now()}
		ev.Data.Attempt = attempt
		data, err := events.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{events.SandboxSubject("ns", "box", events.TokenPreHookDone): data}
	}
	for _, tc := range []struct {
		name     string
		last     map[string][]byte
		wantFail bool
	}{
		{"prehook-done of the attempt in the stream", done("a1"), false},
		{"prehook-done of an earlier attempt only", done("a0"), true},
		{"no prehook-done", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := &lastJS{last: tc.last}
			pub, err := events.NewPublisher(js, "hookrunner", nil)
			if err != nil {
				t.Fatal(err)
			}
			agents := agentsfake.NewSimpleClientset()
			if _, err := agents.AgentsV1alpha1().Sandboxes("ns").Create(context.Background(), sb.DeepCopy(), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			h := &HookRunner{kube: fake.NewClientset(), agents: agents, publisher: pub}
			if err := h.Handle(context.Background(), &events.Message{Event: events.Event{Type: events.TypePatched, Data: d}}); err != nil {
				t.Fatalf("Handle = %v", err)
			}
			switch {
			case !tc.wantFail && len(js.published) != 0:
				t.Fatalf("published %s %q, want nothing", js.published[0].Type, js.published[0].Data.Message)
			case tc.wantFail && (len(js.published) != 1 || js.published[0].Data.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed ||
				!strings.Contains(js.published[0].Data.Message, "was deleted during the upgrade")):
				t.Fatalf("published %v, want one PreUpgradeFailed saying the pod was deleted", js.published)
			}
		})
	}
}
