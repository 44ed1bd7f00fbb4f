package hookrunner

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	agentsfake "molt.dev/pkg/generated/clientset/versioned/fake"
)

// A pod without an IP, in a sandbox that sets no runtime-url, has no agent-runtime
// address: the hook is not sent to "http://:49983" (the hookrunner's own host). A pod that
// may still get one is looked at again; one that ended fails the step at once, whatever
// IP or runtime-url it has. The reason names the pod, its phase, the missing IP, the hook,
// and the next step.
func TestNoRuntimeAddress(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns"}}
	withURL := sb.DeepCopy()
	withURL.Annotations = map[string]string{agentsv1alpha1.AnnotationRuntimeURL: "http://runtime.example:49983"}
	pod := func(phase corev1.PodPhase, ip, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "p1"},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase, PodIP: ip}}
	}
	for _, tc := range []struct {
		name     string
		sb       *agentsv1alpha1.Sandbox
		pod      *corev1.Pod
		st       step
		wantWait bool
		want     []string // in the reason; none: no reason
	}{
		{name: "running with an IP", sb: sb, pod: pod(corev1.PodRunning, "10.0.0.1", "n1"), st: preStep},
		{name: "no IP, but a runtime-url", sb: withURL, pod: pod(corev1.PodPending, "", ""), st: preStep},
		{name: "not scheduled yet", sb: sb, pod: pod(corev1.PodPending, "", ""), st: preStep, wantWait: true,
			want: []string{"pod ns/box (uid p1) is Pending", "not scheduled to a node yet", "has no IP yet", "preUpgrade cannot run in it", "kubectl describe pod -n ns box", "create a new SandboxUpdateOps to resume"}},
		{name: "running before its IP shows", sb: sb, pod: pod(corev1.PodRunning, "", "n1"), st: postStep, wantWait: true,
			want: []string{"is Running (on node n1)", "has no IP yet", "postUpgrade cannot run in it"}},
		{name: "failed, preUpgrade", sb: sb, pod: pod(corev1.PodFailed, "", "n1"), st: preStep,
			want: []string{"pod ns/box (uid p1) is Failed", "has no IP", "preUpgrade cannot run in it", "no backup was taken", "kubectl describe pod -n ns box", "create a new SandboxUpdateOps to resume"}},
		{name: "succeeded, postUpgrade", sb: sb, pod: pod(corev1.PodSucceeded, "", "n1"), st: postStep,
			want: []string{"is Succeeded", "has no IP", "postUpgrade cannot run in it", "rebuilds the pod"}},
		// An ended pod keeps its last IP, which may be another pod's by now.
		{name: "failed, with its last IP", sb: sb, pod: pod(corev1.PodFailed, "10.0.0.7", "n1"), st: preStep,
			want: []string{"is Failed (on node n1): nothing runs in it", "its last IP 10.0.0.7 may belong to another pod now", "preUpgrade cannot run in it", "no backup was taken"}},
		{name: "succeeded, with its last IP and a runtime-url", sb: withURL, pod: pod(corev1.PodSucceeded, "10.0.0.7", "n1"), st: postStep,
			want: []string{"is Succeeded", "postUpgrade cannot run in it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, wait := noRuntimeAddress(tc.sb, tc.pod, tc.st)
			if len(tc.want) == 0 {
				if why != "" {
					t.Fatalf("reason %q, want none", why)
				}
				return
			}
			if wait != tc.wantWait {
				t.Errorf("wait = %t, want %t", wait, tc.wantWait)
			}
			for _, w := range tc.want {
				if !strings.Contains(why, w) {
					t.Errorf("reason %q\nwant it to contain %q", why, w)
				}
			}
			if strings.Contains(why, "http://:") {
				t.Errorf("reason %q names an address without a host", why)
			}
		})
	}
}

// recordingJS is a JetStream that records what is published and accepts it.
type recordingJS struct {
	jetstream.JetStream
	published []events.Event
}

func (r *recordingJS) PublishMsg(_ context.Context, msg *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ev, err := events.Decode(msg.Data)
	if err != nil {
		return nil, err
	}
	r.published = append(r.published, ev)
	return &jetstream.PubAck{Stream: events.StreamName}, nil
}

// Handle never calls the agent-runtime of a pod that has no IP (before, the call went
// to "http://:49983" and the user read that an agent-runtime there was not reachable):
// a Pending pod's message is looked at again with nothing published, a Failed pod's
// step fails with the reason.
func TestHookIsNotSentToAPodWithoutIP(t *testing.T) {
	controller := true
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "sb",
		Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "ops1"}}}
	sb.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/backup"}}}}
	d := events.Data{Ops: events.OpsRef{Name: "ops1", UID: "a1"}, Sandbox: events.SandboxRef{Namespace: "ns", Name: "box", UID: "sb"}, Attempt: "a1", OldPodUID: "p1"}
	for _, phase := range []corev1.PodPhase{corev1.PodPending, corev1.PodFailed} {
		t.Run(string(phase), func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "p1",
				OwnerReferences: []metav1.OwnerReference{{Kind: "Sandbox", Name: "box", UID: "sb", Controller: &controller}}},
				Status: corev1.PodStatus{Phase: phase}}
			js := &recordingJS{}
			pub, err := events.NewPublisher(js, "hookrunner", nil)
			if err != nil {
				t.Fatal(err)
			}
			// Created through the client: the fake's tracker would file an object
			// given to NewSimpleClientset under a guessed resource, "sandboxs".
			agents := agentsfake.NewSimpleClientset()
			if _, err := agents.AgentsV1alpha1().Sandboxes("ns").Create(context.Background(), sb.DeepCopy(), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var calls []string
			h := &HookRunner{kube: fake.NewClientset(pod), agents: agents, publisher: pub,
				exec: func(_ context.Context, req agentruntime.ExecRequest) (agentruntime.Result, error) {
					calls = append(calls, req.BaseURL)
					return agentruntime.Result{Exited: true}, nil
				}}
			err = h.Handle(context.Background(), &events.Message{Event: events.Event{Type: events.TypePatched, Data: d}})
			if len(calls) != 0 {
				t.Fatalf("agent-runtime called at %v, want no call", calls)
			}
			switch phase {
			case corev1.PodPending:
				if err == nil || !strings.Contains(err.Error(), "has no IP yet") || len(js.published) != 0 {
					t.Fatalf("Handle = %v, published %d; want an error to look again and nothing published", err, len(js.published))
				}
			default:
				if err != nil || len(js.published) != 1 {
					t.Fatalf("Handle = %v, published %d; want the failure published", err, len(js.published))
				}
				got := js.published[0].Data
				if js.published[0].Type != events.TypeFailed || got.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed ||
					!strings.HasPrefix(got.Message, "hook execution error: pod ns/box (uid p1) is Failed") {
					t.Fatalf("published %s %s %q; want failed PreUpgradeFailed naming the pod", js.published[0].Type, got.Reason, got.Message)
				}
			}
		})
	}
}
