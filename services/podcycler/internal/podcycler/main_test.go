package podcycler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	agentsclient "molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/service"
	"molt.dev/services/podcycler/internal/podcycler"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// readyTimeout is the shared podcycler's --pod-ready-timeout: long enough for a kwok pod
// to start on a busy machine, short enough for the deadline test.
const readyTimeout = 15 * time.Second

// handlerGrace is the shared podcycler's --upgrade-pod-grace.
const handlerGrace = 3 * time.Second

var (
	podcyclerOnce sync.Once
	podcyclerErr  = make(chan error, 1)
)

// startPodcycler runs podcycler.Run in-process against the test cluster and NATS, once for
// the package: tests share it as replicas of a real deployment share the stream. It runs
// until the test binary exits (testenv.Main stops NATS and the cluster, and exits); a Run
// that returns early fails the test that is running.
//
// One instance, rather than one per test, also keeps the tests clear of a hang seen in
// Consume's shutdown (a pull request that outlives its FetchMaxWait), reported to the lead.
func startPodcycler(t *testing.T) {
	t.Helper()
	env := testenv.Get(t)
	podcyclerOnce.Do(func() {
		cfg := podcycler.Config{
			Options: service.Options{
				Name: "podcycler", Kubeconfig: env.Kubeconfig, NATSURL: env.NATSURL, NATSAuth: env.NATSAuth("podcycler"), HTTPAddr: "127.0.0.1:0",
				KubeQPS: 100, KubeBurst: 200, ShutdownTimeout: 5 * time.Second,
			},
			Workers:         4,
			PodReadyTimeout: readyTimeout,
			UpgradePodGrace: handlerGrace,
		}
		go func() { podcyclerErr <- podcycler.Run(context.Background(), cfg) }()
	})
	t.Cleanup(func() {
		select {
		case err := <-podcyclerErr:
			podcyclerErr <- err
			t.Errorf("podcycler.Run returned while tests run: %v", err)
		default:
		}
	})
}

func agents(t *testing.T) agentsclient.Interface {
	t.Helper()
	c, err := agentsclient.NewForConfig(testenv.Get(t).RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createSandbox creates a sandbox whose template has one container "main" running image.
func createSandbox(t *testing.T, ns, name, image string) *agentsv1alpha1.Sandbox {
	t.Helper()
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	sb.Spec.Template = &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "demo"}, Annotations: map[string]string{"demo/note": "kept"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}},
	}
	created, err := agents(t).AgentsV1alpha1().Sandboxes(ns).Create(context.Background(), sb, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create sandbox %s/%s: %v", ns, name, err)
	}
	return created
}

// updateSandbox applies mutate to the current sandbox and writes it, retrying conflicts.
func updateSandbox(t *testing.T, ns, name string, mutate func(*agentsv1alpha1.Sandbox)) *agentsv1alpha1.Sandbox {
	t.Helper()
	client := agents(t).AgentsV1alpha1().Sandboxes(ns)
	var out *agentsv1alpha1.Sandbox
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sb, err := client.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(sb)
		out, err = client.Update(context.Background(), sb, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update sandbox %s/%s: %v", ns, name, err)
	}
	return out
}

// waitPodReady waits until the sandbox's pod exists, is not being deleted, is Ready and
// (if notUID is set) is not the pod with that UID; it returns the pod.
func waitPodReady(t *testing.T, ns, name string, notUID string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testenv.Eventually(t, 60*time.Second, "pod "+ns+"/"+name+" Ready", func() (bool, error) {
		p, err := testenv.Get(t).Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.DeletionTimestamp != nil || string(p.UID) == notUID {
			return false, fmt.Errorf("pod %s is the old one or being deleted", p.UID)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				pod = p
				return true, nil
			}
		}
		return false, fmt.Errorf("pod %s phase %s, not Ready", p.UID, p.Status.Phase)
	})
	return pod
}

func waitPodGone(t *testing.T, ns, name string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "pod "+ns+"/"+name+" gone", func() (bool, error) {
		p, err := testenv.Get(t).Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("pod %s still there (deleting: %v)", p.UID, p.DeletionTimestamp != nil)
	})
}

// podCreations records, from an informer on the namespace's pods (every add event, no
// sampling), the UIDs of the pods created after it started, by pod name.
type podCreations struct {
	mu   sync.Mutex
	uids map[string][]string
}

func watchPodCreations(t *testing.T, ns string) *podCreations {
	t.Helper()
	pc := &podCreations{}
	factory := informers.NewSharedInformerFactoryWithOptions(testenv.Get(t).Kube, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			pc.mu.Lock()
			defer pc.mu.Unlock()
			if pc.uids != nil {
				pc.uids[pod.Name] = append(pc.uids[pod.Name], string(pod.UID))
			}
		}
	}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	// The initial list reports the pods that exist already as adds: start counting now.
	pc.mu.Lock()
	pc.uids = map[string][]string{}
	pc.mu.Unlock()
	return pc
}

func (pc *podCreations) of(name string) []string {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return append([]string(nil), pc.uids[name]...)
}

// bus is the test's own connection to the event stream.
type bus struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	publisher *events.Publisher
}

func connectBus(t *testing.T) *bus {
	t.Helper()
	nc := testenv.Get(t).NATSConnect(t, "", "admin")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(context.Background(), js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js, "hookrunner", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &bus{nc: nc, js: js, publisher: pub}
}

// subscribe collects the events of one sandbox and one token from now on.
func (b *bus) subscribe(t *testing.T, ns, name, token string) <-chan events.Event {
	t.Helper()
	ch := make(chan events.Event, 16)
	sub, err := b.nc.Subscribe(events.SandboxSubject(ns, name, token), func(m *nats.Msg) {
		ev, err := events.Decode(m.Data)
		if err != nil {
			t.Errorf("decode event on %s: %v", m.Subject, err)
			return
		}
		select {
		case ch <- ev:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// redeliver publishes ev again under a new message id, so the stream's duplicate window
// does not drop it and podcycler's consumer really handles it a second time; it returns
// the stream sequence.
func (b *bus) redeliver(t *testing.T, ev events.Event) uint64 {
	t.Helper()
	ev.Source, ev.Time = "hookrunner", time.Now().UTC()
	ev.ID = events.MessageID(ev)
	body, err := events.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := ev.Subject()
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{"Content-Type": []string{events.MediaType}}}
	ack, err := b.js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(ev.ID+"-redelivery-"+time.Now().Format(time.RFC3339Nano)))
	if err != nil {
		t.Fatalf("publish redelivery: %v", err)
	}
	return ack.Sequence
}

// waitHandled waits until podcycler's consumer has delivered stream sequence seq and has
// nothing pending or unacknowledged.
func (b *bus) waitHandled(t *testing.T, seq uint64) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("podcycler consumer to ack seq %d", seq), func() (bool, error) {
		cons, err := b.js.Consumer(context.Background(), events.StreamName, events.ConsumerPodCycler)
		if err != nil {
			return false, err
		}
		info, err := cons.Info(context.Background())
		if err != nil {
			return false, err
		}
		if info.Delivered.Stream < seq || info.NumAckPending > 0 || info.NumPending > 0 {
			return false, fmt.Errorf("delivered seq %d, ack pending %d, pending %d", info.Delivered.Stream, info.NumAckPending, info.NumPending)
		}
		return true, nil
	})
}

// next waits for one event on ch.
func next(t *testing.T, ch <-chan events.Event, what string, timeout time.Duration) events.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(timeout):
		t.Fatalf("no %s event within %s", what, timeout)
	}
	panic("unreachable")
}
