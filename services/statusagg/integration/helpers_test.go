package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/service"
	"molt.dev/pkg/upgrade"
	"molt.dev/services/statusagg/internal/statusagg"
)

const (
	imageV1 = "registry.example.com/agent:v1"
	imageV2 = "registry.example.com/agent:v2"
	timeout = 60 * time.Second
)

// harness is one running statusagg plus clients for both worlds.
type harness struct {
	t      *testing.T
	env    *testenv.Env
	agents versioned.Interface
	js     jetstream.JetStream
	pub    *events.Publisher
	addr   string
}

// start runs statusagg.Run in the background until the test ends and waits
// until it is ready (clients connected, informers synced).
func start(t *testing.T) *harness { return startWith(t, nil) }

// startWith is start with the config changed by tune (nil: as start).
func startWith(t *testing.T, tune func(*statusagg.Config)) *harness {
	t.Helper()
	env := testenv.Get(t)
	addr := freeAddr(t)
	cfg := statusagg.Config{
		Options: service.Options{Name: "statusagg", Kubeconfig: env.Kubeconfig, NATSURL: env.NATSURL, NATSAuth: env.NATSAuth("statusagg"), HTTPAddr: addr,
			KubeQPS: 100, KubeBurst: 200, ShutdownTimeout: 10 * time.Second},
		SandboxWorkers: 2, OpsWorkers: 2, EventWorkers: 4,
	}
	if tune != nil {
		tune(&cfg)
	}
	exited := testenv.Background(t, "statusagg.Run", 30*time.Second, func(ctx context.Context) error { return statusagg.Run(ctx, cfg) }, nil)
	testenv.Eventually(t, timeout, "statusagg /readyz", func() (bool, error) {
		if gone, err := exited(); gone {
			t.Fatalf("statusagg.Run returned early: %v", err)
		}
		code, body := httpGet(addr, "/readyz")
		return code == http.StatusOK, fmt.Errorf("%d %s", code, body)
	})

	agents, err := versioned.NewForConfig(env.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	nc := env.NATSConnect(t, "", "admin")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, env: env, agents: agents, js: js, pub: pub, addr: addr}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpGet(addr, path string) (int, string) { return testenv.HTTPGet(addr, path) }

// createSandbox creates a sandbox running image, with labels.
func (h *harness) createSandbox(ns, name string, labels map[string]string, image string) *agentsv1alpha1.Sandbox {
	h.t.Helper()
	sb := &agentsv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: agentsv1alpha1.SandboxSpec{EmbeddedSandboxTemplate: agentsv1alpha1.EmbeddedSandboxTemplate{
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}},
			},
		}},
	}
	out, err := h.agents.AgentsV1alpha1().Sandboxes(ns).Create(context.Background(), sb, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("create sandbox %s/%s: %v", ns, name, err)
	}
	return out
}

// createPod creates the sandbox's pod from its template, owned by it, as
// podcycler does.
func (h *harness) createPod(sb *agentsv1alpha1.Sandbox) *corev1.Pod {
	h.t.Helper()
	rev, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		h.t.Fatal(err)
	}
	labels := map[string]string{agentsv1alpha1.LabelPodTemplateHash: rev}
	for k, v := range sb.Spec.Template.Labels {
		labels[k] = v
	}
	controller := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: sb.Name, Namespace: sb.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1alpha1.SchemeGroupVersion.String(), Kind: "Sandbox",
				Name: sb.Name, UID: sb.UID, Controller: &controller}},
		},
		Spec: *sb.Spec.Template.Spec.DeepCopy(),
	}
	out, err := h.env.Kube.CoreV1().Pods(sb.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("create pod %s/%s: %v", sb.Namespace, sb.Name, err)
	}
	return out
}

// runningSandbox creates a sandbox and its pod and waits until it is Running.
func (h *harness) runningSandbox(ns, name string, labels map[string]string) *agentsv1alpha1.Sandbox {
	h.t.Helper()
	sb := h.createSandbox(ns, name, labels, imageV1)
	h.createPod(sb)
	return h.waitSandbox(ns, name, "phase Running", func(sb *agentsv1alpha1.Sandbox) bool {
		return sb.Status.Phase == agentsv1alpha1.SandboxRunning
	})
}

// createOps creates an ops selecting every sandbox of ns that sets image.
func (h *harness) createOps(ns, name, image string, maxUnavailable int) *agentsv1alpha1.SandboxUpdateOps {
	h.t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "main", "image": image}}}})
	if err != nil {
		h.t.Fatal(err)
	}
	mu := intstr.FromInt32(int32(maxUnavailable))
	ops := &agentsv1alpha1.SandboxUpdateOps{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: agentsv1alpha1.SandboxUpdateOpsSpec{
			Selector:       &metav1.LabelSelector{},
			UpdateStrategy: agentsv1alpha1.SandboxUpdateOpsStrategy{MaxUnavailable: &mu},
			Patch:          runtime.RawExtension{Raw: patch},
		},
	}
	out, err := h.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Create(context.Background(), ops, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("create ops %s/%s: %v", ns, name, err)
	}
	return out
}

func (h *harness) waitSandbox(ns, name, what string, cond func(*agentsv1alpha1.Sandbox) bool) *agentsv1alpha1.Sandbox {
	h.t.Helper()
	var sb *agentsv1alpha1.Sandbox
	testenv.Eventually(h.t, timeout, "sandbox "+name+": "+what, func() (bool, error) {
		var err error
		sb, err = h.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cond(sb), fmt.Errorf("status %s", statusJSON(sb.Status))
	})
	return sb
}

func (h *harness) waitOps(ns, name, what string, cond func(*agentsv1alpha1.SandboxUpdateOps) bool) *agentsv1alpha1.SandboxUpdateOps {
	h.t.Helper()
	var ops *agentsv1alpha1.SandboxUpdateOps
	testenv.Eventually(h.t, timeout, "ops "+name+": "+what, func() (bool, error) {
		var err error
		ops, err = h.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cond(ops), fmt.Errorf("status %s", statusJSON(ops.Status))
	})
	return ops
}

func statusJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// upgrading reports whether sb's Upgrading condition has reason.
func upgrading(sb *agentsv1alpha1.Sandbox, reason string) bool {
	c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
	return c != nil && c.Reason == reason
}

// event builds an event of ops's attempt on sb.
func event(typ string, sb *agentsv1alpha1.Sandbox, ops *agentsv1alpha1.SandboxUpdateOps) events.Event {
	return events.Event{Type: typ, Data: events.Data{
		Ops:     events.OpsRef{Name: ops.Name, UID: ops.UID},
		Sandbox: events.SandboxRef{Namespace: sb.Namespace, Name: sb.Name, UID: sb.UID},
		Attempt: string(ops.UID),
	}}
}

func (h *harness) publish(ev events.Event) {
	h.t.Helper()
	if err := h.pub.Publish(context.Background(), ev); err != nil {
		h.t.Fatalf("publish %s: %v", ev.Type, err)
	}
}

// redeliver publishes ev again under a new message id, as a redelivery
// would hand it to the handler again.
func (h *harness) redeliver(ev events.Event) {
	h.t.Helper()
	ev.Source, ev.ID, ev.Time = "test", events.MessageID(ev), time.Now().UTC()
	body, err := events.Encode(ev)
	if err != nil {
		h.t.Fatal(err)
	}
	subject, err := ev.Subject()
	if err != nil {
		h.t.Fatal(err)
	}
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{"Content-Type": []string{events.MediaType}}}
	if _, err := h.js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(fmt.Sprintf("%s-again-%d", ev.ID, time.Now().UnixNano()))); err != nil {
		h.t.Fatalf("redeliver %s: %v", ev.Type, err)
	}
}

// drained waits until statusagg's consumer, which takes every subject, has acknowledged
// every message in the stream. (Its pending count alone would not do: the server counts
// a message there a moment after it acknowledged the publish.)
func (h *harness) drained() {
	h.t.Helper()
	testenv.Eventually(h.t, timeout, "statusagg consumer drained", func() (bool, error) {
		stream, err := h.js.Stream(context.Background(), events.StreamName)
		if err != nil {
			return false, err
		}
		sinfo, err := stream.Info(context.Background())
		if err != nil {
			return false, err
		}
		cons, err := stream.Consumer(context.Background(), events.ConsumerStatusAgg)
		if err != nil {
			return false, err
		}
		info, err := cons.Info(context.Background())
		if err != nil {
			return false, err
		}
		last := sinfo.State.LastSeq
		return info.AckFloor.Stream >= last && info.NumAckPending == 0, fmt.Errorf("acknowledged up to %d of %d, ack pending %d", info.AckFloor.Stream, last, info.NumAckPending)
	})
}

// deliveredCount is how many deliveries statusagg's consumer has made so far.
func (h *harness) deliveredCount() uint64 {
	h.t.Helper()
	cons, err := h.js.Consumer(context.Background(), events.StreamName, events.ConsumerStatusAgg)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return info.Delivered.Consumer
}

// waitEvent waits for a Kubernetes Event with reason on the object named name.
func (h *harness) waitEvent(ns, name, reason, messagePart string) corev1.Event {
	h.t.Helper()
	var found corev1.Event
	testenv.Eventually(h.t, timeout, "Event "+reason+" on "+name, func() (bool, error) {
		list, err := h.env.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range list.Items {
			seen = append(seen, e.InvolvedObject.Name+"/"+e.Reason)
			if e.InvolvedObject.Name == name && e.Reason == reason && strings.Contains(e.Message, messagePart) {
				found = e
				return true, nil
			}
		}
		return false, fmt.Errorf("events: %v", seen)
	})
	return found
}

// metric returns the value of the /metrics line starting with series.
func (h *harness) metric(series string) (string, bool) {
	_, body := httpGet(h.addr, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return rest, true
		}
	}
	return "", false
}
