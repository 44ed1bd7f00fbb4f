package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// The NATS permissions of deploy/nats/auth.conf (issue 10), proven against
// the harness's NATS, which runs that file.

// natsPublishes is what each user of auth.conf may publish, by event
// token: the README's event catalogue, plus the watchdog's re-drives
// (statusagg) and the patcher's resume at PostUpgrade (pod-ready).
var natsPublishes = map[string][]string{
	"selector":   {events.TokenRequested},
	"patcher":    {events.TokenPatched, events.TokenPodReady, events.TokenStageStarted, events.TokenFailed},
	"hookrunner": {events.TokenStageStarted, events.TokenPreHookDone, events.TokenPostHookDone, events.TokenFailed},
	"podcycler":  {events.TokenStageStarted, events.TokenPodReady, events.TokenFailed},
	"statusagg":  {events.TokenRedriveRequested, events.TokenRedrivePreHookDone, events.TokenRedrivePodReady, events.TokenFailed},
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

	events.TokenRedriveRequested:   events.TypeRedriveRequested,
	events.TokenRedrivePreHookDone: events.TypeRedrivePreHookDone,
	events.TokenRedrivePodReady:    events.TypeRedrivePodReady,
}

// forge publishes a valid event of type typ for the sandbox ns/name, of the
// ops opsName whose UID is the attempt (as for any ops's attempt), as source
// would, through JetStream, and returns the publish error (nil: stored). An
// event that would not even encode fails the test: a refusal must be the
// server's.
func forge(t *testing.T, nc *nats.Conn, source, typ string, sb events.SandboxRef, opsName, attempt string, with ...func(*events.Data)) error {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js, source, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ev := events.Event{Type: typ, Source: source, Time: time.Now().UTC(), Data: events.Data{
		Ops:     events.OpsRef{Name: opsName, UID: types.UID(attempt)},
		Sandbox: sb,
		Attempt: attempt,
		Stage:   agentsv1alpha1.UpgradingReasonPreUpgrade,
	}}
	if typ == events.TypeFailed {
		ev.Data.Reason = agentsv1alpha1.UpgradingReasonPreUpgradeFailed
	}
	if _, redrive := events.RedriveOf(typ); redrive {
		ev.Data.Redrive = 1
	}
	for _, f := range with {
		f(&ev.Data)
	}
	ev.ID = events.MessageID(ev)
	if _, err := events.Encode(ev); err != nil {
		t.Fatalf("the forged %s does not encode, so it proves nothing: %v", typ, err)
	}
	return pub.Publish(ctx, ev)
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
	// A refused publish is answered by nobody: each waits out forge's
	// timeout, so the users run side by side.
	t.Run("publish", func(t *testing.T) {
		for user, allowed := range natsPublishes {
			t.Run(user, func(t *testing.T) {
				t.Parallel()
				nc := env.NATSConnect(t, "", user)
				for token, typ := range natsEventTypes {
					name := "perm-" + user + "-" + token
					err := forge(t, nc, user, typ, events.SandboxRef{Namespace: ns, Name: name, UID: types.UID("uid-" + name)}, "perm", "perm-"+user)
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
			})
		}
	})
	// A service reads only its own consumer.
	nc := env.NATSConnect(t, "", "patcher")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	lookUp := func(name string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := js.Consumer(ctx, events.StreamName, name)
		return err
	}
	if err := lookUp(events.ConsumerPodCycler); err == nil {
		t.Errorf("patcher looked up consumer %s: allowed, want refused", events.ConsumerPodCycler)
	}
	if err := lookUp(events.ConsumerPatcher); err != nil {
		t.Errorf("patcher looked up its own consumer: %v", err)
	}

	// viewer cannot rewrite a service's consumer, by either form of the
	// create request: the one that names the consumer in its subject, and
	// the bare one that names it in its body.
	viewer := env.NATSConnect(t, "", "viewer", nats.CustomInboxPrefix("_INBOX")) // as the nats CLI and kubectl molt history
	hijack := []byte(`{"stream_name":"` + events.StreamName + `","config":{"name":"` + events.ConsumerPatcher +
		`","filter_subject":"molt.hijacked.x.y","ack_policy":"explicit","deliver_policy":"all"}}`)
	for _, subject := range []string{"$JS.API.CONSUMER.CREATE." + events.StreamName, "$JS.API.CONSUMER.CREATE." + events.StreamName + "." + events.ConsumerPatcher} {
		if msg, err := viewer.Request(subject, hijack, 2*time.Second); err == nil && !strings.Contains(string(msg.Data), `"error"`) {
			t.Errorf("viewer's create of consumer %s on %s was answered without an error: %s", events.ConsumerPatcher, subject, msg.Data)
		}
	}
	adminJS, err := jetstream.New(env.NATSConnect(t, "", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := adminJS.Consumer(ctx, events.StreamName, events.ConsumerPatcher)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.CachedInfo().Config; cfg.FilterSubject == "molt.hijacked.x.y" || slices.Contains(cfg.FilterSubjects, "molt.hijacked.x.y") || cfg.Durable != events.ConsumerPatcher {
		t.Errorf("viewer rewrote consumer %s: %+v", events.ConsumerPatcher, cfg)
	}
	// It still replays the history the way kubectl molt history does: an
	// ordered (ephemeral) consumer.
	viewerJS, err := jetstream.New(viewer)
	if err != nil {
		t.Fatal(err)
	}
	readCtx, readCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer readCancel()
	stream, err := viewerJS.Stream(readCtx, events.StreamName)
	if err != nil {
		t.Fatalf("viewer cannot open stream %s: %v", events.StreamName, err)
	}
	history, err := stream.OrderedConsumer(readCtx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SandboxHistorySubject(ns, "perm-viewer-"+events.TokenRequested)}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatalf("viewer cannot create an ordered consumer to read the history: %v", err)
	}
	if _, err := history.Info(readCtx); err != nil {
		t.Errorf("viewer's ordered consumer: %v", err)
	}
}

// TestForgedPrehookDoneChangesNothing: while sandboxes run a long preUpgrade
// backup, a prehook-done for each (the event that makes podcycler delete the
// old pod) is forged with the right attempt id, as the patcher and as
// statusagg (whose credentials may not publish it: statusagg's re-drives
// have subjects of their own) and with a wrong password. Nothing reaches
// the stream. Re-drives of prehook-done and pod-ready, which statusagg's
// credentials may publish, are stored, but the status does not show the
// attempt past PreUpgrade, so podcycler and hookrunner refuse them and
// statusagg does not record them: every
// pod keeps its UID, and every sandbox stays in PreUpgrade, for 30 s.
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
	attempts, uids := map[string]string{}, map[string]types.UID{}
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
			attempts[n], uids[n] = upgrade.CurrentAttempt(sb), sb.UID
		}
		return true, nil
	})

	patcher := env.NATSConnect(t, "", "patcher")
	statusagg := env.NATSConnect(t, "", "statusagg") // its re-drives have subjects of their own
	for _, n := range names {
		if err := forge(t, patcher, "hookrunner", events.TypePreHookDone, events.SandboxRef{Namespace: ns, Name: n, UID: uids[n]}, "forge", attempts[n]); err == nil {
			t.Errorf("prehook-done for %s forged with the patcher's credentials: stored, want refused", n)
		}
		if err := forge(t, statusagg, "hookrunner", events.TypePreHookDone, events.SandboxRef{Namespace: ns, Name: n, UID: uids[n]}, "forge", attempts[n]); err == nil {
			t.Errorf("prehook-done for %s forged with statusagg's credentials: stored, want refused", n)
		}
		nc, err := nats.Connect(env.NATSURL, nats.UserInfo("hookrunner", "guessed"))
		if err == nil {
			nc.Close()
			t.Errorf("connect as hookrunner with a wrong password: accepted, want refused")
		}
		if got := storedOn(t, env, events.SandboxSubject(ns, n, events.TokenPreHookDone)); got != 0 {
			t.Errorf("%d prehook-done messages of %s on the stream while its preUpgrade runs, want 0", got, n)
		}
		// statusagg's user may publish re-drives: one stands for a prehook-done,
		// as the watchdog's would (the pod to replace, the target), but the
		// status does not show the attempt past PreUpgrade, so nothing acts on it.
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		target, err := upgrade.Revision(sb.Spec.Template)
		if err != nil {
			t.Fatal(err)
		}
		if err := forge(t, statusagg, "statusagg", events.TypeRedrivePreHookDone, events.SandboxRef{Namespace: ns, Name: n, UID: uids[n]}, "forge", attempts[n], func(d *events.Data) {
			d.Stage, d.OldPodUID, d.TargetRevision = agentsv1alpha1.UpgradingReasonUpgradePod, types.UID(before[n]), target
		}); err != nil {
			t.Errorf("re-drive of prehook-done for %s published with statusagg's credentials: %v, want stored (its user may publish re-drives)", n, err)
		}
		// And one of pod-ready: postUpgrade would run, or fail, on the old pod.
		if err := forge(t, statusagg, "statusagg", events.TypeRedrivePodReady, events.SandboxRef{Namespace: ns, Name: n, UID: uids[n]}, "forge", attempts[n], func(d *events.Data) {
			d.Stage, d.NewPodUID, d.TargetRevision = "", types.UID(before[n]), target
		}); err != nil {
			t.Errorf("re-drive of pod-ready for %s published with statusagg's credentials: %v, want stored", n, err)
		}
	}
	testenv.Consistently(t, 30*time.Second, "every pod keeps its UID and its sandbox stays in PreUpgrade", func() (bool, error) {
		now := podUIDs(t, s, ns, names)
		for _, n := range names {
			if now[n] != before[n] {
				return false, fmt.Errorf("pod of %s is now %s, was %s", n, now[n], before[n])
			}
			if c := upgradingCondition(t, s, ns, n); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPreUpgrade {
				return false, fmt.Errorf("%s: Upgrading %+v, want PreUpgrade (a re-drive is not recorded)", n, c)
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
	problems := recreatedOnce(t, s, ns, names, oldUID, adds, image)
	reportProblems(t, s, problems)
	assertNoneExited(t, s)
}

// readmeEventRow is one row of the README's event catalogue.
type readmeEventRow struct {
	token                string
	producers, consumers []string
}

// readmeEvents parses the README table between <!-- events --> and
// <!-- /events -->, by event type.
func readmeEvents(t *testing.T) map[string]readmeEventRow {
	t.Helper()
	rows := map[string]readmeEventRow{}
	for _, cells := range tableRows(readmeBlock(t, "events"), 4) {
		rows[strings.Trim(cells[0], "`")] = readmeEventRow{token: strings.Trim(cells[1], "`"), producers: listCell(cells[2]), consumers: listCell(cells[3])}
	}
	return rows
}

// TestREADMEEventCatalogue: the README's event catalogue names every event
// type of pkg/events with its subject token; its consumers are exactly the
// durable consumers whose filters take that token, and its producers exactly
// the users that NATS lets publish it (natsPublishes, which
// TestNATSEachUserPublishesOnlyItsOwnEvents checks against the server).
func TestREADMEEventCatalogue(t *testing.T) {
	rows := readmeEvents(t)
	if got, want := len(rows), len(events.Types()); got != want {
		t.Errorf("README's event catalogue has %d rows, pkg/events %d types", got, want)
	}
	for _, typ := range events.Types() {
		row, ok := rows[typ]
		if !ok {
			t.Errorf("README's event catalogue lacks %s", typ)
			continue
		}
		token, _ := events.TokenFor(typ)
		if row.token != token {
			t.Errorf("%s: README says token %q, pkg/events %q", typ, row.token, token)
		}
		var consumers, producers []string
		for _, c := range events.Consumers() {
			for _, f := range events.FilterSubjects(c) {
				if subjectMatches(f, events.SandboxSubject("ns", "sbx", token)) && !slices.Contains(consumers, c) {
					consumers = append(consumers, c)
				}
			}
		}
		for user, tokens := range natsPublishes {
			if slices.Contains(tokens, token) {
				producers = append(producers, user)
			}
		}
		sort.Strings(consumers)
		sort.Strings(producers)
		if !slices.Equal(row.consumers, consumers) {
			t.Errorf("%s: README's consumers %v, the consumers' filters say %v", typ, row.consumers, consumers)
		}
		if !slices.Equal(row.producers, producers) {
			t.Errorf("%s: README's producers %v, NATS lets %v publish it", typ, row.producers, producers)
		}
	}
}

// subjectMatches reports whether subject falls under the NATS filter f
// (tokens, `*` for one, a final `>` for the rest).
func subjectMatches(f, subject string) bool {
	ft, st := strings.Split(f, "."), strings.Split(subject, ".")
	for i, tok := range ft {
		switch {
		case tok == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case tok != "*" && tok != st[i]:
			return false
		}
	}
	return len(ft) == len(st)
}
