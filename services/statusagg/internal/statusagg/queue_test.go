package statusagg

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/devcluster"
	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/service"
)

func TestLocate(t *testing.T) {
	now := time.Unix(1000, 0)
	const limit = 10 * time.Second
	c := consumerState{ackFloor: 10, delivered: 20, pending: 5, ackPending: 3, moved: now.Add(-time.Second)}
	stuck := c
	stuck.moved = now.Add(-limit)
	idle := c
	idle.pending, idle.ackPending = 0, 0
	for _, tc := range []struct {
		name     string
		seq      uint64
		c        consumerState
		inFlight time.Time
		want     int
	}{
		{"acknowledged", 10, c, time.Time{}, inputHandled},
		{"not delivered, the queue moves", 21, c, time.Time{}, inputQueued},
		{"not delivered, the queue has not moved for a deadline", 21, stuck, time.Time{}, inputHandled},
		{"not delivered, but nothing is pending: gone", 21, idle, time.Time{}, inputHandled},
		{"delivered, first seen in flight", 15, c, time.Time{}, inputInFlight},
		{"delivered, in flight for less than two deadlines", 15, c, now.Add(-2*limit + time.Second), inputInFlight},
		{"delivered, in flight for two deadlines: stalled", 15, c, now.Add(-2 * limit), inputHandled},
		{"delivered, in flight while the queue is stuck", 15, stuck, time.Time{}, inputInFlight},
		{"delivered, nothing unacknowledged: handled out of order", 15, idle, time.Time{}, inputHandled},
	} {
		if got := locate(tc.seq, tc.c, now, tc.inFlight, limit); got != tc.want {
			t.Errorf("%s: locate = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// movedAt takes the server's time of the consumer's last activity, but never
// later than now, and never before the look before when it moved since.
func TestMovedAt(t *testing.T) {
	now := time.Unix(1000, 0)
	at := func(s int) *time.Time { t := now.Add(time.Duration(s) * time.Second); return &t }
	prev := consumerState{lookedAt: now.Add(-10 * time.Second)}
	for _, tc := range []struct {
		name string
		ok   bool
		last []*time.Time
		want time.Time
	}{
		{"first look, no activity known", false, []*time.Time{nil, nil}, now},
		{"first look, the latest activity", false, []*time.Time{at(-300), at(-120)}, *at(-120)},
		{"a server clock ahead of ours", false, []*time.Time{at(5)}, now},
		{"moved since the look before, the server says earlier", true, []*time.Time{at(-60)}, prev.lookedAt},
		{"moved since the look before, after it", true, []*time.Time{at(-3)}, *at(-3)},
	} {
		if got := movedAt(now, prev, tc.ok, tc.last...); !got.Equal(tc.want) {
			t.Errorf("%s: movedAt = %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestQueueLookOnJetStream asks a real JetStream, as the NATS user statusagg (so auth.conf's
// permissions are proven too), where a stage's input is: queued behind others, in flight,
// acknowledged, of another attempt, or never published.
func TestQueueLookOnJetStream(t *testing.T) {
	connect, admin, hookrunner := hookrunnerQueue(t)
	ctx := context.Background()
	self, err := events.EnsureConsumer(ctx, admin, events.ConsumerStatusAgg, events.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	publish := publisher(t, admin)
	patched := func(name, attempt string) { publish(events.TypePatched, name, attempt) }
	for _, n := range []string{"a", "b", "c"} {
		patched(n, "att")
	}
	patched("old", "earlier-attempt")
	// The server counts a consumer's pending messages after it acknowledged the publish, in
	// its own time: wait until it has counted all four, or "c is queued" would race it.
	testenv.Eventually(t, 10*time.Second, "consumer "+events.ConsumerHookRunner+" counts the 4 published messages pending", func() (bool, error) {
		info, err := hookrunner.Info(ctx)
		if err != nil {
			return false, err
		}
		return info.NumPending == 4, fmt.Errorf("%d pending", info.NumPending)
	})

	now := time.Now() // the stream's messages carry the server's time
	q := newQueues(connect("statusagg"), func() time.Time { return now })
	const limit = 30 * time.Second
	pre := agentsv1alpha1.UpgradingReasonPreUpgrade
	undelivered := false // the last answer was an input not delivered yet
	waiting := func(name, attempt string) bool {
		t.Helper()
		l := q.look()
		defer l.done()
		where, ok, err := l.waiting(ctx, "ns", name, attempt, pre, limit)
		if err != nil {
			t.Fatalf("waiting(%s): %v", name, err)
		}
		undelivered = l.undelivered
		t.Logf("%s: waiting %v %s", name, ok, where)
		return ok
	}
	if !waiting("c", "att") || !undelivered {
		t.Error("c's patched, published and not delivered, is not seen queued and undelivered")
	}
	if waiting("old", "att") {
		t.Error("an earlier attempt's patched counts as this attempt's input")
	}
	if waiting("never", "att") {
		t.Error("a sandbox whose input was never published is seen queued")
	}

	// Deliver a and b; ack a.
	batch, err := hookrunner.Fetch(2)
	if err != nil {
		t.Fatal(err)
	}
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	if len(got) != 2 {
		t.Fatalf("fetched %d messages, want 2", len(got))
	}
	if err := got[0].DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if waiting("a", "att") {
		t.Error("a's acknowledged patched is seen queued")
	}
	// a's hook reported its end (prehook-done) and statusagg has not applied it yet: the
	// stage is not stalled, for a deadline.
	publish(events.TypePreHookDone, "a", "att")
	if !waiting("a", "att") {
		t.Error("a's PreUpgrade, whose prehook-done was just published, is taken for a stall")
	}
	if !waiting("b", "att") || undelivered {
		t.Error("b's patched, delivered and not acknowledged, is not seen in flight (and delivered)")
	}
	now = now.Add(2 * limit)
	if waiting("b", "att") {
		t.Error("b's patched, held by a handler for two deadlines, is still seen in flight: a hung handler would hold the stage forever")
	}
	// (Each look is one watchdog check, which forgets what it did not see in flight: a is
	// asked after b.) a's prehook-done is two deadlines old, but statusagg's own consumer
	// has not reached it: statusagg is behind, and the success waits in its queue.
	if !waiting("a", "att") {
		t.Error("a's prehook-done, not yet acknowledged by statusagg's consumer, is taken for a stall")
	}
	// statusagg handles everything published so far.
	handled, err := self.Fetch(5)
	if err != nil {
		t.Fatal(err)
	}
	for m := range handled.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "statusagg's consumer acknowledged the 5 messages", func() (bool, error) {
		info, err := self.Info(ctx)
		if err != nil {
			return false, err
		}
		return info.AckFloor.Stream >= 5, fmt.Errorf("ack floor %d", info.AckFloor.Stream)
	})
	if waiting("a", "att") {
		t.Error("a's prehook-done, published two deadlines ago and not applied, still holds its stage")
	}
	// c's queue has not moved for a deadline either (nothing was taken or finished since).
	if waiting("c", "att") {
		t.Error("c's patched is seen queued though its consumer has not moved for a deadline")
	}
	if err := got[1].DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if !waiting("c", "att") {
		t.Error("c's patched is not seen queued after its consumer moved again")
	}
}

// A consumer whose service died (it took and finished a message, then nothing
// for two deadlines while another waits) is seen stuck at the watchdog's first
// look at it, from the server's time of its last activity: before, that first
// look counted as a move, and a dead hookrunner's stage was re-driven only a
// deadline later (walk: 2m17s for a 65 s deadline).
func TestFirstLookAtAConsumerThatStoppedLongAgo(t *testing.T) {
	connect, admin, hookrunner := hookrunnerQueue(t)
	ctx := context.Background()
	publish := publisher(t, admin)
	publish(events.TypePatched, "a", "att")
	batch, err := hookrunner.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	publish(events.TypePatched, "b", "att")
	testenv.Eventually(t, 10*time.Second, "consumer "+events.ConsumerHookRunner+" counts b pending", func() (bool, error) {
		info, err := hookrunner.Info(ctx)
		if err != nil {
			return false, err
		}
		return info.NumPending == 1 && info.AckFloor.Stream == 1, fmt.Errorf("%d pending, ack floor %d", info.NumPending, info.AckFloor.Stream)
	})
	const limit = 30 * time.Second
	now := time.Now().Add(2 * limit) // two deadlines since its last move
	q := newQueues(connect("statusagg"), func() time.Time { return now })
	l := q.look()
	defer l.done()
	where, ok, err := l.waiting(ctx, "ns", "b", "att", agentsv1alpha1.UpgradingReasonPreUpgrade, limit)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Errorf("b's patched is seen waiting (%s) at a consumer that has not moved for two deadlines", where)
	}
}

// TestQueueLookOnADirectGetStream: on a stream that allows direct gets (set outside molt:
// `nats stream edit MOLT_EVENTS --allow-direct`, or a stream made with `nats stream add`),
// nats.go reads the last message of a subject from $JS.API.DIRECT.GET.MOLT_EVENTS.<subject>
// instead of $JS.API.STREAM.MSG.GET.MOLT_EVENTS. auth.conf lets statusagg ask that too, so
// the watchdog still finds a stage's queued input instead of timing out on a permissions
// violation.
func TestQueueLookOnADirectGetStream(t *testing.T) {
	connect := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := connect("admin")
	s, err := events.EnsureStream(ctx, admin, events.StreamConfig{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowDirect = true
	if _, err := admin.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("allow direct gets on stream %s: %v", events.StreamName, err)
	}
	hookrunner, err := events.EnsureConsumer(ctx, admin, events.ConsumerHookRunner, events.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	publish := publisher(t, admin)
	publish(events.TypePatched, "a", "att")
	// The server counts the message pending at the consumer in its own time after it
	// acknowledged the publish: wait for it, or "a is queued" would race it.
	testenv.Eventually(t, 10*time.Second, "consumer "+events.ConsumerHookRunner+" counts the published message pending", func() (bool, error) {
		info, err := hookrunner.Info(ctx)
		if err != nil {
			return false, err
		}
		return info.NumPending == 1, fmt.Errorf("%d pending", info.NumPending)
	})

	q := newQueues(connect("statusagg"), time.Now)
	l := q.look()
	defer l.done()
	// A refused request is answered by nobody: it waits out lookCtx.
	lookCtx, cancelLook := context.WithTimeout(ctx, 10*time.Second)
	defer cancelLook()
	where, ok, err := l.waiting(lookCtx, "ns", "a", "att", agentsv1alpha1.UpgradingReasonPreUpgrade, time.Minute)
	if err != nil {
		t.Fatalf("statusagg looks for a's patched on a stream with allow_direct: %v", err)
	}
	if !l.stream.CachedInfo().Config.AllowDirect {
		t.Fatal("statusagg's view of the stream does not allow direct gets: the look did not use DIRECT.GET and proves nothing")
	}
	if !ok {
		t.Errorf("a's patched, published and not delivered, is not seen queued on a stream with allow_direct")
	}
	t.Logf("a: waiting %v %s", ok, where)
}

// startNATS starts an in-process NATS with JetStream and deploy/nats/auth.conf's users and
// permissions, and returns how to connect to it as one of them; both end with the test.
// hookrunnerQueue starts NATS with molt's stream and hookrunner's consumer:
// how to connect as a user, the admin's connection, and the consumer.
func hookrunnerQueue(t *testing.T) (connect func(user string) jetstream.JetStream, admin jetstream.JetStream, hookrunner jetstream.Consumer) {
	t.Helper()
	ctx := context.Background()
	connect = startNATS(t)
	admin = connect("admin")
	if _, err := events.EnsureStream(ctx, admin, events.StreamConfig{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	hookrunner, err := events.EnsureConsumer(ctx, admin, events.ConsumerHookRunner, events.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return connect, admin, hookrunner
}

func startNATS(t *testing.T) (connect func(user string) jetstream.JetStream) {
	t.Helper()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pw, err := devcluster.LoadNATSPasswords(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range pw.ServerEnv() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	srv, err := testenv.StartNATS(devcluster.NATSAuthConf(root), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return func(user string) jetstream.JetStream {
		t.Helper()
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, pw.Password(user)), nats.CustomInboxPrefix(service.InboxPrefix(user)))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
}

// publisher returns how to publish an event of type typ for sandbox ns/name of attempt
// through js.
func publisher(t *testing.T, js jetstream.JetStream) (publish func(typ, name, attempt string)) {
	t.Helper()
	pub, err := events.NewPublisher(js, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	return func(typ, name, attempt string) {
		t.Helper()
		ev := events.Event{Type: typ, Data: events.Data{
			Sandbox: events.SandboxRef{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Ops:     events.OpsRef{Name: "ops", UID: types.UID(attempt)}, Attempt: attempt, TargetRevision: "r2",
		}}
		if err := pub.Publish(context.Background(), ev); err != nil {
			t.Fatalf("publish %s for %s: %v", typ, name, err)
		}
	}
}
