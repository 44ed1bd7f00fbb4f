package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/testenv"
	"molt.dev/pkg/upgrade"
)

// The NATS permissions of deploy/nats/auth.conf (issue 10), proven against
// the harness's NATS, which runs that file.

// natsPublishes is what each user of auth.conf may publish, by event
// token: the README's event catalogue, plus the watchdog's re-drives
// (statusagg) and the patcher's resume at PostUpgrade (pod-ready).
var natsPublishes = map[string][]string{
	"selector":   {events.TokenRequested},
	"patcher":    {events.TokenPatched, events.TokenPodReady, events.TokenFailed},
	"hookrunner": {events.TokenStageStarted, events.TokenPreHookDone, events.TokenPostHookDone, events.TokenFailed},
	"podcycler":  {events.TokenStageStarted, events.TokenPodReady, events.TokenFailed},
	"statusagg":  {events.TokenRequested, events.TokenPreHookDone, events.TokenPodReady, events.TokenFailed},
	"viewer":     nil,
}

// natsEventTypes maps each event token to its type.
var natsEventTypes = map[string]string{
	events.TokenRequested:    events.TypeRequested,
	events.TokenPatched:      events.TypePatched,
	events.TokenPreHookDone:  events.TypePreHookDone,
	events.TokenPodReady:     events.TypePodReady,
	events.TokenPostHookDone: events.TypePostHookDone,
	events.TokenFailed:       events.TypeFailed,
	events.TokenStageStarted: events.TypeStageStarted,
}

// forge publishes an event of type typ for the sandbox ns/name as user
// would, through JetStream, and returns the publish error (nil: stored).
func forge(t *testing.T, nc *nats.Conn, user, typ, ns, name, attempt string) error {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js, user, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	d := events.Data{
		Ops:     events.OpsRef{Name: "forged"},
		Sandbox: events.SandboxRef{Namespace: ns, Name: name, UID: "forged"},
		Attempt: attempt,
		Stage:   agentsv1alpha1.UpgradingReasonPreUpgrade,
	}
	if typ == events.TypeFailed {
		d.Reason = agentsv1alpha1.UpgradingReasonPreUpgradeFailed
	}
	return pub.Publish(ctx, events.Event{Type: typ, Data: d})
}

// storedOn returns how many messages of the stream are on subject.
func storedOn(t *testing.T, env *testenv.Env, subject string) uint64 {
	t.Helper()
	js, err := jetstream.New(env.NATSConnect(t, "", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatalf("look up stream %s: %v", events.StreamName, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatalf("stream info for %s: %v", subject, err)
	}
	return info.State.Subjects[subject]
}

// TestNATSRefusesWhoIsNotMolt: a client without credentials, or with a wrong
// password, is refused at connect.
func TestNATSRefusesWhoIsNotMolt(t *testing.T) {
	env := testenv.Get(t)
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"no credentials", nil},
		{"wrong password", []nats.Option{nats.UserInfo("podcycler", "not-the-password")}},
		{"unknown user", []nats.Option{nats.UserInfo("mallory", env.NATSPasswords.Password("admin"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := nats.Connect(env.NATSURL, tc.opts...)
			if err == nil {
				nc.Close()
				t.Fatalf("connect to %s with %s: accepted, want refused", env.NATSURL, tc.name)
			}
			if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
				t.Fatalf("connect with %s: %v, want an authorization violation", tc.name, err)
			}
		})
	}
}

// TestNATSEachUserPublishesOnlyItsOwnEvents: every user of auth.conf
// publishes each event type; what natsPublishes allows it is stored, every
// other publish is refused and never reaches the stream. And no service can
// read another's consumer.
func TestNATSEachUserPublishesOnlyItsOwnEvents(t *testing.T) {
	env := testenv.Get(t)
	Stack(t) // the services create the stream
	ns := env.Namespace(t)
	for user, allowed := range natsPublishes {
		nc := env.NATSConnect(t, "", user)
		for token, typ := range natsEventTypes {
			name := "perm-" + user + "-" + token
			err := forge(t, nc, user, typ, ns, name, "perm-"+user)
			want := slices.Contains(allowed, token)
			got := storedOn(t, env, events.SandboxSubject(ns, name, token))
			switch {
			case want && err != nil:
				t.Errorf("%s publishing %s: %v, want it stored", user, token, err)
			case want && got != 1:
				t.Errorf("%s publishing %s: %d messages stored, want 1", user, token, got)
			case !want && err == nil:
				t.Errorf("%s publishing %s: stored, want refused", user, token)
			case !want && got != 0:
				t.Errorf("%s publishing %s: refused, but %d messages are on the stream", user, token, got)
			}
		}
	}
	// A service reads only its own consumer.
	nc := env.NATSConnect(t, "", "patcher")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := js.Consumer(ctx, events.StreamName, events.ConsumerPodCycler); err == nil {
		t.Errorf("patcher looked up consumer %s: allowed, want refused", events.ConsumerPodCycler)
	}
	if _, err := js.Consumer(ctx, events.StreamName, events.ConsumerPatcher); err != nil {
		t.Errorf("patcher looked up its own consumer: %v", err)
	}
}

// TestForgedPrehookDoneChangesNothing: while sandboxes run a long preUpgrade
// backup, a prehook-done for each (the event that makes podcycler delete the
// old pod) is forged with the right attempt id, as the patcher (whose
// credentials may not publish it) and with a wrong password. Nothing reaches
// the stream, and every pod keeps its UID for 30 s.
func TestForgedPrehookDoneChangesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test: skipped with -short")
	}
	s := Stack(t)
	env := s.env
	ns := env.Namespace(t)
	names := makeSandboxes(t, s, ns, "forge", 3, "forge-pool", nil)
	before := podUIDs(t, s, ns, names)
	y := strings.Replace(hookOps("forge", "forge-pool", "my-registry/sandbox-image:v2", "sleep 50", "true", 90), "maxUnavailable: 1", "maxUnavailable: 3", 1)
	kubectl(t, y, "apply", "-n", ns, "-f", "-")
	attempts := map[string]string{}
	testenv.Eventually(t, time.Minute, "every sandbox in PreUpgrade", func() (bool, error) {
		for _, n := range names {
			sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			c := upgradingCondition(t, s, ns, n)
			if c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPreUpgrade || upgrade.CurrentAttempt(sb) == "" {
				return false, fmt.Errorf("%s: %+v", n, c)
			}
			attempts[n] = upgrade.CurrentAttempt(sb)
		}
		return true, nil
	})

	patcher := env.NATSConnect(t, "", "patcher")
	for _, n := range names {
		if err := forge(t, patcher, "hookrunner", events.TypePreHookDone, ns, n, attempts[n]); err == nil {
			t.Errorf("prehook-done for %s forged with the patcher's credentials: stored, want refused", n)
		}
		nc, err := nats.Connect(env.NATSURL, nats.UserInfo("hookrunner", "guessed"))
		if err == nil {
			nc.Close()
			t.Errorf("connect as hookrunner with a wrong password: accepted, want refused")
		}
		if got := storedOn(t, env, events.SandboxSubject(ns, n, events.TokenPreHookDone)); got != 0 {
			t.Errorf("%d prehook-done messages of %s on the stream while its preUpgrade runs, want 0", got, n)
		}
	}
	testenv.Consistently(t, 30*time.Second, "every pod keeps its UID", func() (bool, error) {
		now := podUIDs(t, s, ns, names)
		for _, n := range names {
			if now[n] != before[n] {
				return false, fmt.Errorf("pod of %s is now %s, was %s", n, now[n], before[n])
			}
		}
		return true, nil
	})
	kubectl(t, "", "delete", "suo", "forge", "-n", ns, "--wait=false")
}

// TestThreeNodeNATSClusterLosesANode (issue 10): the services run against a
// 3-node JetStream cluster started from deploy/nats/nats.conf (three
// processes on loopback ports), the stream replicated on all three
// (--stream-replicas 3). While 30 sandboxes upgrade 10 at a time, one node,
// chosen at random, is killed with SIGKILL and started again on its store.
// The ops completes 30/30/0/0 and every pod is created exactly once.
func TestThreeNodeNATSClusterLosesANode(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test: skipped with -short")
	}
	const (
		sandboxes = 30
		opsName   = "nc"
		pool      = "nc-pool"
		image     = "my-registry/sandbox-image:v2"
	)
	rng := faultSeed(t)
	env := testenv.Get(t)
	ns := env.Namespace(t)
	cluster, err := env.StartNATSCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatalf("start a 3-node NATS cluster from deploy/nats/nats.conf (run `make tools` if bin/nats-server is missing): %v", err)
	}
	t.Cleanup(cluster.Stop)
	s := OwnStack(t, stackOptions{natsURL: cluster.URLs, env: []string{"MOLT_STREAM_REPLICAS=3"}})
	t.Logf("namespace %s; NATS %s; service logs in %s", ns, cluster.URLs, s.cfg.LogDir())

	js, err := jetstream.New(env.NATSConnect(t, cluster.URLs, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatalf("look up stream %s on the cluster: %v", events.StreamName, err)
	}
	if r := st.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("stream %s has %d replicas, want 3 (--stream-replicas)", events.StreamName, r)
	}

	names := makeSandboxes(t, s, ns, "nc", sandboxes, pool, nil)
	oldUID := podUIDs(t, s, ns, names)
	w := watch(t, s, ns)
	kubectl(t, opsYAML(opsName, pool, "10", image), "apply", "-n", ns, "-f", "-")
	at := int32(3 + rng.Intn(10))
	waitUpdated(t, s, ns, opsName, at, 3*time.Minute)
	victim := cluster.Nodes[rng.Intn(len(cluster.Nodes))]
	t.Logf("kill -9 the NATS node on %s (updated %d)", victim.URL, opsUpdated(s, ns, opsName))
	if err := victim.Kill9(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2*time.Second + time.Duration(rng.Int63n(int64(3*time.Second))))
	if err := victim.Start(); err != nil {
		t.Fatalf("restart the NATS node: %v", err)
	}

	final := waitEnded(t, s, ns, opsName, 4*time.Minute)
	assertCounters(t, final, sandboxes)
	_, _, adds := w.snapshot()
	problems := map[string][]string{}
	for _, n := range names {
		pod, err := env.Kube.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{})
		switch {
		case err != nil:
			problems[n] = append(problems[n], fmt.Sprintf("get pod: %v", err))
		case len(adds[n]) != 1:
			problems[n] = append(problems[n], fmt.Sprintf("%d pods created, want exactly 1 (%v)", len(adds[n]), adds[n]))
		case string(pod.UID) == oldUID[n] || adds[n][0] != string(pod.UID):
			problems[n] = append(problems[n], fmt.Sprintf("pod now %s; created during the upgrade %v; before %s", pod.UID, adds[n], oldUID[n]))
		case pod.Spec.Containers[0].Image != image:
			problems[n] = append(problems[n], fmt.Sprintf("pod image %s, want %s", pod.Spec.Containers[0].Image, image))
		}
	}
	reportProblems(t, s, problems)
	assertNoneExited(t, s)
}
