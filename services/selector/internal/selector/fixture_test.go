package selector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/service"
	"molt.dev/pkg/upgrade"
)

const (
	poolName = "my-sandbox-pool"
	oldImage = "registry.example/agent:v1"
	newImage = "registry.example/agent:v2"
)

// fixture is one test's namespace, clients and event recorder.
type fixture struct {
	t      *testing.T
	ns     string
	agents versioned.Interface
	events *recorder
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	env := testenv.Get(t)
	agents, err := versioned.NewForConfig(env.RestConfig)
	if err != nil {
		t.Fatalf("build agents client: %v", err)
	}
	f := &fixture{t: t, ns: env.Namespace(t), agents: agents}
	f.events = recordRequested(t, f.ns)
	return f
}

// startSelector runs selector.Run in-process, with leader election on a
// Lease in the test's namespace. On cleanup it deletes the test's ops (so
// the namespace is not held by their finalizers) and stops Run.
func (f *fixture) startSelector() {
	f.t.Helper()
	cfg := f.selectorConfig()
	testenv.Background(f.t, "selector.Run", 20*time.Second, func(ctx context.Context) error { return Run(ctx, cfg) }, f.deleteAllOps)
}

// selectorConfig is the selector's configuration in f's namespace.
func (f *fixture) selectorConfig() Config {
	env := testenv.Get(f.t)
	return Config{
		Options: service.Options{
			Name: "selector", Kubeconfig: env.Kubeconfig, NATSURL: env.NATSURL, NATSAuth: env.NATSAuth("selector"), HTTPAddr: "127.0.0.1:0",
			KubeQPS: 50, KubeBurst: 100, ShutdownTimeout: 5 * time.Second,
		},
		LeaderElection: service.LeaderElection{Enabled: true, Namespace: f.ns, LeaseName: LeaseName}, Workers: 2, RepublishAfter: DefaultRepublishAfter,
	}
}

func (f *fixture) deleteAllOps() {
	ctx := context.Background()
	err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if err != nil {
		f.t.Errorf("delete ops of %s: %v", f.ns, err)
		return
	}
	testenv.Eventually(f.t, 30*time.Second, "ops of the namespace released and gone", func() (bool, error) {
		list, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(list.Items) == 0, fmt.Errorf("%d ops left", len(list.Items))
	})
}

// sandbox creates a pool-labelled sandbox running image and sets its phase.
func (f *fixture) sandbox(name, image string, phase agentsv1alpha1.SandboxPhase, extraLabels map[string]string) *agentsv1alpha1.Sandbox {
	f.t.Helper()
	ctx := context.Background()
	labels := map[string]string{agentsv1alpha1.LabelSandboxTemplate: poolName}
	for k, v := range extraLabels {
		labels[k] = v
	}
	sb := &agentsv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: labels},
	}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "main", Image: image}},
	}}
	created, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Create(ctx, sb, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("create sandbox %s: %v", name, err)
	}
	created.Status.Phase = phase
	updated, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		f.t.Fatalf("set phase %s on sandbox %s: %v", phase, name, err)
	}
	return updated
}

// ops creates a SandboxUpdateOps selecting the pool and setting image.
func (f *fixture) ops(name string, maxUnavailable int, image string, mutate func(*agentsv1alpha1.SandboxUpdateOps)) *agentsv1alpha1.SandboxUpdateOps {
	f.t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{
		"containers": []map[string]any{{"name": "main", "image": image}},
	}})
	if err != nil {
		f.t.Fatal(err)
	}
	mu := intstr.FromInt32(int32(maxUnavailable))
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{agentsv1alpha1.LabelSandboxTemplate: poolName}}
	ops.Spec.UpdateStrategy.MaxUnavailable = &mu
	ops.Spec.Patch = runtime.RawExtension{Raw: patch}
	if mutate != nil {
		mutate(ops)
	}
	created, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Create(context.Background(), ops, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("create ops %s: %v", name, err)
	}
	return created
}

// updateOps applies mutate to the current ops, retrying on conflict.
func (f *fixture) updateOps(name string, status bool, mutate func(*agentsv1alpha1.SandboxUpdateOps)) {
	f.t.Helper()
	ctx := context.Background()
	client := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ops, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(ops)
		if status {
			_, err = client.UpdateStatus(ctx, ops, metav1.UpdateOptions{})
		} else {
			_, err = client.Update(ctx, ops, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		f.t.Fatalf("update ops %s: %v", name, err)
	}
}

// finish writes what statusagg would once the attempt of ops on sandbox
// name ends with reason: UpgradeAttempt (message = ops UID) and Upgrading.
func (f *fixture) finish(name string, ops *agentsv1alpha1.SandboxUpdateOps, reason string) {
	f.t.Helper()
	ctx := context.Background()
	client := f.agents.AgentsV1alpha1().Sandboxes(f.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sb, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{
			Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: string(ops.UID),
		})
		meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{
			Type: agentsv1alpha1.ConditionUpgrading, Status: agentsv1alpha1.UpgradingConditionStatus(reason), Reason: reason,
		})
		if agentsv1alpha1.IsUpgradingFailedReason(reason) {
			sb.Status.Phase = agentsv1alpha1.SandboxUpgrading
		} else {
			sb.Status.Phase = agentsv1alpha1.SandboxRunning
		}
		_, err = client.UpdateStatus(ctx, sb, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		f.t.Fatalf("finish sandbox %s with %s: %v", name, reason, err)
	}
}

// getSandbox reads one sandbox.
func (f *fixture) getSandbox(name string) *agentsv1alpha1.Sandbox {
	f.t.Helper()
	sb, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatalf("get sandbox %s: %v", name, err)
	}
	return sb
}

// claimed returns the sorted names of sandboxes labelled with ops.
func (f *fixture) claimed(ops string) ([]string, error) {
	list, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: agentsv1alpha1.LabelUpdateOps + "=" + ops,
	})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, sb := range list.Items {
		names = append(names, sb.Name)
	}
	slices.Sort(names)
	return names, nil
}

// waitClaimed waits until exactly want (sorted) carry the ops label.
func (f *fixture) waitClaimed(ops string, want ...string) {
	f.t.Helper()
	testenv.Eventually(f.t, 30*time.Second, fmt.Sprintf("sandboxes %v claimed by %s", want, ops), func() (bool, error) {
		got, err := f.claimed(ops)
		return err == nil && slices.Equal(got, want), fmt.Errorf("claimed %v, err %v", got, err)
	})
}

// hasFinalizer waits until the ops carries the protection finalizer (which
// also proves the selector has reconciled it).
func (f *fixture) waitFinalizer(name string) {
	f.t.Helper()
	testenv.Eventually(f.t, 30*time.Second, "finalizer on ops "+name, func() (bool, error) {
		ops, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return slices.Contains(ops.Finalizers, agentsv1alpha1.FinalizerSandboxUpdateOpsProtection), fmt.Errorf("finalizers %v", ops.Finalizers)
	})
}

// waitPausedBy waits until the selector has paused ops name before its
// first sandbox for the reason annotation records (value want, the pause's
// generation and UID in pausedAt), and checks it claimed no sandbox.
func (f *fixture) waitPausedBy(name, annotation, pausedAt, want string) {
	f.t.Helper()
	testenv.Eventually(f.t, 30*time.Second, "ops "+name+" paused for "+annotation, func() (bool, error) {
		o, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v, at := o.Annotations[annotation], o.Annotations[pausedAt]
		return o.Spec.Paused && v == want && at == strconv.FormatInt(o.Generation, 10)+" "+string(o.UID),
			fmt.Errorf("paused %v, annotations %q at %q (generation %d)", o.Spec.Paused, v, at, o.Generation)
	})
	if got, err := f.claimed(name); err != nil || len(got) != 0 {
		f.t.Fatalf("claimed %v (err %v) before the pause, want none", got, err)
	}
}

// resumeAndWaitClaimed resumes ops name as a user would (spec.paused:
// false), waits until it claims sandboxes, and checks the selector did not
// pause it again.
func (f *fixture) resumeAndWaitClaimed(name string, sandboxes ...string) {
	f.t.Helper()
	f.updateOps(name, false, func(o *agentsv1alpha1.SandboxUpdateOps) { o.Spec.Paused = false })
	f.waitClaimed(name, sandboxes...)
	if o, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil || o.Spec.Paused {
		f.t.Fatalf("ops after the user resumed it: paused %v (err %v), want it left running", o.Spec.Paused, err)
	}
}

func (f *fixture) waitOpsGone(name string) {
	f.t.Helper()
	testenv.Eventually(f.t, 30*time.Second, "ops "+name+" gone", func() (bool, error) {
		_, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Errorf("get: %v", err)
	})
}

// recorder collects the `requested` events stored in the stream for one
// namespace, through an ordered consumer (what JetStream stored, after
// de-duplication).
type recorder struct {
	mu  sync.Mutex
	evs []events.Event
	err error
}

func recordRequested(t *testing.T, ns string) *recorder {
	t.Helper()
	ctx := context.Background()
	nc := testenv.Get(t).NATSConnect(t, "", "admin")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("open JetStream: %v", err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SubjectPrefix + "." + events.EncodeToken(ns) + ".*." + events.TokenRequested},
	})
	if err != nil {
		t.Fatalf("create ordered consumer: %v", err)
	}
	r := &recorder{}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		ev, err := events.Decode(msg.Data())
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			r.err = err
			return
		}
		r.evs = append(r.evs, ev)
	})
	if err != nil {
		t.Fatalf("consume requested events: %v", err)
	}
	t.Cleanup(func() {
		cc.Stop()
		nc.Close()
	})
	return r
}

// sandboxes returns the sandbox names of the recorded events, in order.
func (r *recorder) sandboxes() ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.evs {
		out = append(out, ev.Data.Sandbox.Name)
	}
	return out, r.err
}

func (r *recorder) all() []events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs)
}

// waitRequested waits until exactly want (in order) were requested.
func (f *fixture) waitRequested(want ...string) {
	f.t.Helper()
	testenv.Eventually(f.t, 30*time.Second, fmt.Sprintf("requested events for %v", want), func() (bool, error) {
		got, err := f.events.sandboxes()
		return err == nil && slices.Equal(got, want), fmt.Errorf("requested %v, err %v", got, err)
	})
}

// checkClaimedAt checks that a requested event carries a sandbox
// resourceVersion at which the sandbox is already claimed by the event's ops:
// the next stage reads the sandbox at least as new as it, from the API
// server's watch cache, and must see the claim.
func (f *fixture) checkClaimedAt(ev events.Event) {
	f.t.Helper()
	rv, name := ev.Data.SandboxResourceVersion, ev.Data.Sandbox.Name
	if rv == "" {
		f.t.Errorf("requested for %s carries no sandboxResourceVersion", name)
		return
	}
	list, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "metadata.name=" + name, ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact,
	})
	if err != nil {
		f.t.Errorf("list sandbox %s at resourceVersion %s: %v", name, rv, err)
		return
	}
	if len(list.Items) != 1 {
		f.t.Errorf("at the resourceVersion %s its requested carries, sandbox %s is not there (%d found)", rv, name, len(list.Items))
		return
	}
	if labels := list.Items[0].Labels; labels[agentsv1alpha1.LabelUpdateOps] != ev.Data.Ops.Name {
		f.t.Errorf("at the resourceVersion %s its requested carries, sandbox %s is not claimed by ops %s: labels %v", rv, name, ev.Data.Ops.Name, labels)
	}
}
