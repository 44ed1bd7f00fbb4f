package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	agentsinformers "molt.dev/pkg/generated/informers/externalversions"
	"molt.dev/pkg/upgrade"
)

// The faults of issue 7 that need a stack of their own (OwnStack): NATS as a
// process the test kills, two replicas of every service with leader
// election, a short duplicate window. Each test runs its services against a
// nats-server process with a fresh store, so the services create the stream
// with the test's own config.

// The Leases the leader-elected services campaign for (selector.LeaseName
// and statusagg.LeaseName, internal to their modules).
const (
	selectorLease  = "molt-selector"
	statusaggLease = "molt-statusagg"
)

// faultSeed returns the seed for a test's random choices, logged so that a
// failure can be replayed with MOLT_CHAOS_SEED=<seed>.
func faultSeed(t *testing.T) *rand.Rand {
	t.Helper()
	seed := time.Now().UnixNano()
	if v := os.Getenv("MOLT_CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("MOLT_CHAOS_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (replay with MOLT_CHAOS_SEED=%d)", seed, seed)
	return rand.New(rand.NewSource(seed))
}

// natsProcess starts bin/nats-server as a process of the test's own, with a
// fresh store, and stops it when the test ends. Its store and log are kept.
func natsProcess(t *testing.T) *testenv.NATSProcess {
	t.Helper()
	env := testenv.Get(t)
	dir, err := os.MkdirTemp("", "molt-e2e-nats-")
	if err != nil {
		t.Fatal(err)
	}
	n, err := env.StartNATSProcess(dir)
	if err != nil {
		t.Fatalf("start bin/nats-server (run `make tools` if it is missing): %v", err)
	}
	t.Cleanup(n.Stop)
	t.Logf("nats-server at %s, store %s, log %s", n.URL, n.StoreDir, n.LogPath)
	return n
}

// markOriginals writes the original-pod marker into each sandbox's pod (its
// own filesystem, lost when the pod is recreated) and empties the hook log on
// the persistent volume, before an ops.
func markOriginals(t *testing.T, s *stack, ns string, names []string) {
	t.Helper()
	for _, n := range names {
		if _, code := sh(t, s, ns, n, "echo original > /root/.molt-original && rm -f /mnt/shared/pre-runs"); code != 0 {
			t.Fatalf("write the original marker into %s: exit %d", n, code)
		}
	}
}

// opsUpdated returns the ops's updatedReplicas (0 while it cannot be read).
func opsUpdated(s *stack, ns, name string) int32 {
	o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return 0
	}
	return o.Status.UpdatedReplicas
}

// waitUpdated waits until the ops has at least n sandboxes updated.
func waitUpdated(t *testing.T, s *stack, ns, name string, n int32, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("ops %s: %d sandboxes updated", name, n), func() (bool, error) {
		got := opsUpdated(s, ns, name)
		return got >= n, fmt.Errorf("%d updated", got)
	})
}

// waitEnded waits until the ops is Completed or Failed and returns it.
func waitEnded(t *testing.T, s *stack, ns, name string, timeout time.Duration) *agentsv1alpha1.SandboxUpdateOps {
	t.Helper()
	var ops *agentsv1alpha1.SandboxUpdateOps
	testenv.Eventually(t, timeout, "ops "+name+" Completed or Failed", func() (bool, error) {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ops = o
		return upgrade.IsFinished(o), fmt.Errorf("phase %q status %+v", o.Status.Phase, o.Status)
	})
	return ops
}

// assertCounters checks an ops is Completed with replicas n, updated n,
// updating 0, failed 0.
func assertCounters(t *testing.T, ops *agentsv1alpha1.SandboxUpdateOps, n int32) {
	t.Helper()
	st := ops.Status
	if st.Phase != agentsv1alpha1.SandboxUpdateOpsCompleted {
		t.Errorf("ops %s phase %s, want Completed", ops.Name, st.Phase)
		for _, c := range st.Conditions {
			t.Logf("ops condition %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	if st.Replicas != n || st.UpdatedReplicas != n || st.UpdatingReplicas != 0 || st.FailedReplicas != 0 {
		t.Errorf("ops %s status = replicas %d updated %d updating %d failed %d, want %d %d 0 0",
			ops.Name, st.Replicas, st.UpdatedReplicas, st.UpdatingReplicas, st.FailedReplicas, n, n)
	}
}

// hookedUpgrade is what one sandbox upgraded by a chaos ops (chaosOpsYAMLFor)
// must show.
type hookedUpgrade struct {
	image  string
	oldUID string   // the pod before the ops
	adds   []string // UIDs of the pods created for the sandbox during the ops
	// onePost asks for exactly one postUpgrade run (otherwise at least one:
	// the restore is harmless to repeat).
	onePost bool
}

// hookedUpgradeProblems checks one sandbox after its ops completed: the
// attempt Succeeded; exactly one pod was created, it is the pod now, with
// the new image; preUpgrade ran exactly once, on the original pod and not
// after the new pod was created; postUpgrade ran on the new pod; the
// workspace survived. It returns what does not hold.
func hookedUpgradeProblems(t *testing.T, s *stack, ns, name string, want hookedUpgrade) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return []string{fmt.Sprintf("get sandbox: %v", err)}
	}
	if c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonSucceeded {
		bad("Upgrading condition = %+v, phase %s, want Succeeded", c, sb.Status.Phase)
	}
	pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return append(out, fmt.Sprintf("get pod: %v", err))
	}
	switch {
	case len(want.adds) != 1:
		bad("%d pods created, want exactly 1 (%v)", len(want.adds), want.adds)
	case want.adds[0] != string(pod.UID):
		bad("the pod created during the upgrade (%s) is not the pod now (%s)", want.adds[0], pod.UID)
	}
	if string(pod.UID) == want.oldUID {
		return append(out, "pod was not recreated")
	}
	if img := pod.Spec.Containers[0].Image; img != want.image {
		bad("pod image %s, want %s", img, want.image)
	}
	log, code := sh(t, s, ns, name, "cat /mnt/shared/pre-runs")
	if code != 0 {
		return append(out, fmt.Sprintf("cat /mnt/shared/pre-runs: exit %d", code))
	}
	lines, malformed := parseChaosHookLines(log)
	for _, m := range malformed {
		bad("malformed hook line %q", m)
	}
	var pres, posts []chaosHookLine
	for _, l := range lines {
		if l.host != name {
			bad("hook line from another host: %q", l.raw)
		}
		switch l.kind {
		case "pre":
			pres = append(pres, l)
		case "post":
			posts = append(posts, l)
		default:
			bad("unknown hook line %q", l.raw)
		}
	}
	// creationTimestamp has whole seconds: a run up to 1s after it may still
	// have been before the pod existed.
	created := pod.CreationTimestamp.Unix()
	if len(pres) != 1 {
		bad("%d preUpgrade runs, want exactly 1:\n%s", len(pres), log)
	}
	for _, p := range pres {
		if p.marker != "original" {
			bad("preUpgrade ran on a new pod, not the original: %q", p.raw)
		}
		if p.ts > float64(created)+1 {
			bad("preUpgrade at %.3f is later than the new pod's creationTimestamp %s (%d) + 1s: %q",
				p.ts, pod.CreationTimestamp.UTC().Format(time.RFC3339), created, p.raw)
		}
	}
	switch {
	case len(posts) == 0:
		bad("postUpgrade never ran:\n%s", log)
	case want.onePost && len(posts) != 1:
		bad("%d postUpgrade runs, want exactly 1:\n%s", len(posts), log)
	}
	for _, p := range posts {
		if p.marker != "NEW" {
			bad("postUpgrade ran on the original pod, not the new one: %q", p.raw)
		}
	}
	if got := workspaceFile(t, s, ns, name); got != "data-"+name {
		bad("workspace file after the upgrade = %q, want data-%s", got, name)
	}
	return out
}

// reportProblems fails the test with each sandbox's problems and logs the
// services' lines about the first three.
func reportProblems(t *testing.T, s *stack, problems map[string][]string) {
	t.Helper()
	bad := make([]string, 0, len(problems))
	for n, ps := range problems {
		if len(ps) == 0 {
			continue
		}
		bad = append(bad, n)
		for _, p := range ps {
			t.Errorf("%s: %s", n, p)
		}
	}
	if len(bad) == 0 {
		return
	}
	sort.Strings(bad)
	t.Logf("%d sandboxes broke an invariant: %v; service logs in %s", len(bad), bad, s.cfg.LogDir())
	for i, n := range bad {
		if i == 3 {
			break
		}
		for _, l := range chaosLogLines(s, []string{`"` + n + `"`, n + `"`, "/" + n + " ", "/" + n + `"`}, 60) {
			t.Logf("log %s: %s", n, l)
		}
	}
}

// assertNoneExited fails the test for every instance that is not running:
// only the test may stop a service, and it restarts what it kills.
func assertNoneExited(t *testing.T, s *stack) {
	t.Helper()
	for _, inst := range s.Instances() {
		if p := s.proc(inst); p.Exited() {
			t.Errorf("%s exited on its own (%v); its log %s ends with:\n%s", inst, p.Cmd.ProcessState, p.LogPath, chaosLogTail(p.LogPath, 25))
		}
	}
}

// TestNATSServerKill9MidUpgrade (issue 7): in the chaos setup (backup and
// restore hooks on a persistent volume, maxUnavailable 20%), nats-server is
// killed with SIGKILL mid-upgrade and started again on the same port with
// the same store; five ops in a row, one kill each, at five different
// moments (when 0, 20, 40, 60 and 80% of the sandboxes are updated, plus a
// random delay, and down for a random while). Each ops completes with exact
// counters, every pod is recreated exactly once per ops, preUpgrade runs
// exactly once and never after the sandbox's new pod was created,
// postUpgrade on the new pod, every workspace survives and updatedReplicas
// never goes down. 60 sandboxes, as in the chaos test.
func TestNATSServerKill9MidUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test: skipped with -short")
	}
	const (
		sandboxes = 60
		runs      = 5
		pool      = "nk-pool"
	)
	rng := faultSeed(t)
	env := testenv.Get(t)
	ns := env.Namespace(t)
	nc := natsProcess(t)
	s := OwnStack(t, stackOptions{natsURL: nc.URL})
	t.Logf("namespace %s; service logs in %s", ns, s.cfg.LogDir())

	start := time.Now()
	names := workspaceSandboxes(t, s, ns, "nk", pool, "/mnt/shared", "/data/"+ns+"/$NAME/shared", sandboxes)
	t.Logf("%d sandboxes with workspaces after %s", len(names), time.Since(start).Round(time.Second))
	w := watch(t, s, ns)

	for run := range runs {
		runStart := time.Now()
		opsName := fmt.Sprintf("nk-%d", run+1)
		image := fmt.Sprintf("my-registry/sandbox-image:nk%d", run+1)
		markOriginals(t, s, ns, names)
		oldUID := podUIDs(t, s, ns, names)
		_, _, addsBefore := w.snapshot()

		kubectl(t, chaosOpsYAMLFor(opsName, pool, "20%", image, 30), "apply", "-n", ns, "-f", "-")
		sampler := sampleUpdated(s, ns, opsName, 500*time.Millisecond)

		// The moment: a fifth more of the sandboxes updated each run, then
		// up to 2s more, so the kill lands in any stage.
		waitUpdated(t, s, ns, opsName, int32(run*sandboxes/runs), 3*time.Minute)
		time.Sleep(time.Duration(rng.Int63n(int64(2 * time.Second))))
		down := time.Duration(rng.Int63n(int64(3 * time.Second)))
		t.Logf("run %d: kill -9 nats-server at +%s (updated %d), down for %s",
			run+1, time.Since(runStart).Round(time.Millisecond), opsUpdated(s, ns, opsName), down.Round(time.Millisecond))
		if err := nc.Kill9(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(down)
		if err := nc.Start(); err != nil {
			t.Fatal(err)
		}

		ops := waitEnded(t, s, ns, opsName, 3*time.Minute)
		sampler.sawFinal(t, ops.Status.UpdatedReplicas, 10*time.Second)
		samples, decreases := sampler.finish()
		assertCounters(t, ops, sandboxes)
		for _, d := range decreases {
			t.Errorf("run %d: updatedReplicas decreased: %s", run+1, d)
		}
		_, _, adds := w.snapshot()
		problems := map[string][]string{}
		for _, n := range names {
			problems[n] = hookedUpgradeProblems(t, s, ns, n, hookedUpgrade{
				image: image, oldUID: oldUID[n], adds: adds[n][len(addsBefore[n]):],
			})
		}
		reportProblems(t, s, problems)
		assertNoneExited(t, s)
		if t.Failed() {
			t.Fatalf("run %d (ops %s) broke an invariant; not running the next", run+1, opsName)
		}
		t.Logf("run %d: ops %s completed, every invariant held, after %s (%d samples of updatedReplicas)",
			run+1, opsName, time.Since(runStart).Round(time.Second), samples)
	}
}

// inFlightSampler counts, every interval, the sandboxes an ops admitted
// whose attempt has not ended (upgrade.StateFor == Updating), from a watch of
// the namespace's sandboxes, and keeps the largest count.
type inFlightSampler struct {
	mu      sync.Mutex
	max     int
	maxAt   string
	samples int
	stop    chan struct{}
	done    chan struct{}
}

func sampleInFlight(t *testing.T, s *stack, ns, opsName string, opsUID types.UID, every time.Duration) *inFlightSampler {
	t.Helper()
	f := &inFlightSampler{stop: make(chan struct{}), done: make(chan struct{})}
	stopInformers := make(chan struct{})
	factory := agentsinformers.NewSharedInformerFactoryWithOptions(s.agents, 0, agentsinformers.WithNamespace(ns))
	inf := factory.Agents().V1alpha1().Sandboxes()
	lister, informer := inf.Lister(), inf.Informer()
	factory.Start(stopInformers)
	if !cache.WaitForCacheSync(stopInformers, informer.HasSynced) {
		close(stopInformers)
		t.Fatal("sandbox informer did not sync")
	}
	go func() {
		defer close(f.done)
		defer close(stopInformers)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			list, err := lister.List(labels.Everything())
			if err == nil {
				var inFlight []string
				for _, sb := range list {
					if upgrade.StateFor(sb, opsName, opsUID) == upgrade.Updating {
						inFlight = append(inFlight, sb.Name)
					}
				}
				f.mu.Lock()
				f.samples++
				if len(inFlight) > f.max {
					sort.Strings(inFlight)
					f.max, f.maxAt = len(inFlight), fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), inFlight)
				}
				f.mu.Unlock()
			}
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return f
}

func (f *inFlightSampler) finish() (max int, maxAt string, samples int) {
	close(f.stop)
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.max, f.maxAt, f.samples
}

// leaseHolder waits until the Lease in ns is held and returns the instance
// of svc holding it: the one whose log names the Lease's holder identity
// (each replica logs its identity when it campaigns).
func leaseHolder(t *testing.T, s *stack, ns, lease, svc string) (inst, identity string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "a holder of Lease "+ns+"/"+lease, func() (bool, error) {
		l, err := s.env.Kube.CoordinationV1().Leases(ns).Get(context.Background(), lease, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return false, fmt.Errorf("no holder")
		}
		identity = *l.Spec.HolderIdentity
		for _, r := range s.Replicas(svc) {
			data, err := os.ReadFile(filepath.Join(s.cfg.LogDir(), r+".log"))
			if err != nil {
				return false, err
			}
			if strings.Contains(string(data), identity) {
				inst = r
				return true, nil
			}
		}
		return false, fmt.Errorf("holder %q is in no log of %v", identity, s.Replicas(svc))
	})
	return inst, identity
}

// TestBothLeadersKilledWithTwoReplicas (issue 7): two replicas of every
// service, leader election on; while 50 sandboxes upgrade 10 at a time, the
// selector and statusagg replicas that hold their Leases are killed with
// SIGKILL at the same moment (and started again, as their Deployments
// would). The standbys take over: the ops completes 50/50/0/0, every pod is
// created exactly once, and no more than 10 sandboxes are admitted and
// unfinished at any sample (every 100 ms).
func TestBothLeadersKilledWithTwoReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test: skipped with -short")
	}
	const (
		sandboxes      = 50
		maxUnavailable = 10
		opsName        = "le"
		pool           = "le-pool"
		image          = "my-registry/sandbox-image:v2"
	)
	rng := faultSeed(t)
	env := testenv.Get(t)
	ns := env.Namespace(t)
	nc := natsProcess(t)
	// The Leases live in molt-system, the one namespace where deploy/'s
	// RBAC lets the services hold them; none may be left over.
	for _, l := range []string{selectorLease, statusaggLease} {
		if err := env.Kube.CoordinationV1().Leases(deployNamespace).Delete(context.Background(), l, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete Lease %s/%s: %v", deployNamespace, l, err)
		}
	}
	// Nor may they outlive the test: the other tests' services elect no
	// leader, and kubectl molt status takes a Lease nobody renews for a
	// statusagg that is not running.
	t.Cleanup(func() {
		for _, l := range []string{selectorLease, statusaggLease} {
			_ = env.Kube.CoordinationV1().Leases(deployNamespace).Delete(context.Background(), l, metav1.DeleteOptions{})
		}
	})
	s := OwnStack(t, stackOptions{replicas: 2, natsURL: nc.URL, env: []string{"MOLT_LEADER_ELECT=true"}})
	t.Logf("namespace %s; service logs in %s", ns, s.cfg.LogDir())

	names := makeSandboxes(t, s, ns, "le", sandboxes, pool, nil)
	oldUID := podUIDs(t, s, ns, names)
	selLeader, selID := leaseHolder(t, s, deployNamespace, selectorLease, "selector")
	aggLeader, aggID := leaseHolder(t, s, deployNamespace, statusaggLease, "statusagg")
	t.Logf("leaders: %s (%s), %s (%s)", selLeader, selID, aggLeader, aggID)

	w := watch(t, s, ns)
	kubectl(t, opsYAML(opsName, pool, strconv.Itoa(maxUnavailable), image), "apply", "-n", ns, "-f", "-")
	runStart := time.Now()
	ops, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(context.Background(), opsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inFlight := sampleInFlight(t, s, ns, opsName, ops.UID, 100*time.Millisecond)
	updated := sampleUpdated(s, ns, opsName, 500*time.Millisecond)

	// Mid-run: once 11 to 30 sandboxes are claimed (the ops's status, written
	// at most once a second, moves in steps too coarse for this). A later
	// round is under way, at least 20 sandboxes are still to be admitted, and
	// the ops completes only if the selector's standby takes over.
	at := 11 + rng.Intn(20)
	testenv.Eventually(t, 3*time.Minute, fmt.Sprintf("ops %s: %d sandboxes claimed", opsName, at), func() (bool, error) {
		n := claimed(t, s, ns, opsName)
		return n >= at, fmt.Errorf("%d claimed", n)
	})
	killedAt := time.Now()
	t.Logf("kill -9 %s and %s at +%s (claimed %d, updated %d)", selLeader, aggLeader, time.Since(runStart).Round(time.Millisecond), claimed(t, s, ns, opsName), opsUpdated(s, ns, opsName))
	s.Kill9(t, selLeader)
	s.Kill9(t, aggLeader)
	time.Sleep(time.Duration(rng.Int63n(int64(2 * time.Second))))
	s.Restart(t, selLeader)
	s.Restart(t, aggLeader)

	final := waitEnded(t, s, ns, opsName, 3*time.Minute)
	updated.sawFinal(t, final.Status.UpdatedReplicas, 10*time.Second)
	maxInFlight, maxAt, samples := inFlight.finish()
	_, decreases := updated.finish()
	t.Logf("ops completed after %s; at most %d admitted and unfinished (%d samples)", time.Since(runStart).Round(time.Second), maxInFlight, samples)

	assertCounters(t, final, sandboxes)
	if maxInFlight > maxUnavailable {
		t.Errorf("%d sandboxes admitted and unfinished at once, want at most %d: %s", maxInFlight, maxUnavailable, maxAt)
	}
	if maxInFlight == 0 {
		t.Errorf("no sample saw a sandbox in flight (%d samples): the sampler proves nothing", samples)
	}
	for _, d := range decreases {
		t.Errorf("updatedReplicas decreased: %s", d)
	}
	_, _, adds := w.snapshot()
	problems := recreatedOnce(t, s, ns, names, oldUID, adds, image)
	reportProblems(t, s, problems)
	// A Lease passes to another replica once the killed holder's last renewal
	// is a lease duration (15s) old, within one retry period (2s): 30s after
	// the kill is ample, however soon the ops completed.
	for _, l := range []struct{ lease, svc, killed string }{{selectorLease, "selector", selID}, {statusaggLease, "statusagg", aggID}} {
		var inst, id string
		testenv.Eventually(t, max(time.Until(killedAt.Add(30*time.Second)), time.Second), "Lease "+l.lease+" held by another replica than the killed one", func() (bool, error) {
			inst, id = leaseHolder(t, s, deployNamespace, l.lease, l.svc)
			return id != l.killed, fmt.Errorf("still held by the killed replica's identity %s %s after the kill", id, time.Since(killedAt).Round(time.Second))
		})
		t.Logf("Lease %s now held by %s (%s)", l.lease, inst, id)
	}
	assertNoneExited(t, s)
}

// publishedStored returns molt_events_published_total{type,result="stored"}
// from an instance's /metrics.
func publishedStored(t *testing.T, s *stack, inst, eventType string) int {
	t.Helper()
	resp, err := http.Get(s.MetricsURL(inst))
	if err != nil {
		t.Fatalf("get %s metrics: %v", inst, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "molt_events_published_total{") && strings.Contains(line, `result="stored"`) &&
			strings.Contains(line, `type="`+eventType+`"`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			return int(v)
		}
	}
	return 0
}

// claimedAndRequested returns how many sandboxes ops claims and how many
// `requested` the selector has stored, read when no admission is between its
// label write and its publish: the two reads agree twice, half a second
// apart (at most ten tries). A pair read across one admission would count
// its label and not its request, or the reverse.
func claimedAndRequested(t *testing.T, s *stack, ns, opsName string) (int, int) {
	t.Helper()
	c, r := claimed(t, s, ns, opsName), publishedStored(t, s, "selector", events.TypeRequested)
	for range 10 {
		time.Sleep(500 * time.Millisecond)
		c2, r2 := claimed(t, s, ns, opsName), publishedStored(t, s, "selector", events.TypeRequested)
		if c2 == c && r2 == r {
			break
		}
		c, r = c2, r2
	}
	return c, r
}

// streamDuplicates reads the duplicate window of the running stream.
func streamDuplicates(t *testing.T, url string) time.Duration {
	t.Helper()
	conn := testenv.Get(t).NATSConnect(t, url, "admin")
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatalf("look up stream %s: %v", events.StreamName, err)
	}
	return st.CachedInfo().Config.Duplicates
}

// claimed counts the sandboxes that carry the ops's label.
func claimed(t *testing.T, s *stack, ns, opsName string) int {
	t.Helper()
	list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(context.Background(), metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelUpdateOps + "=" + opsName})
	if err != nil {
		t.Fatalf("list sandboxes claimed by %s: %v", opsName, err)
	}
	return len(list.Items)
}

// TestStatusaggStoppedLongerThanTheDuplicateWindow (issue 7): the stream's
// duplicate window is 10s (--duplicate-window). While 20 sandboxes upgrade 3
// at a time, statusagg is stopped with SIGSTOP for 25s, then continued.
// Right after the stop, maxUnavailable is raised to 8: the selector admits
// five more sandboxes whose status cannot show the attempt while statusagg
// sleeps. It would republish their `requested` every 3s (a lost request's
// recovery), and copies sent after the window would be stored again and
// run the attempt's stages a second time; as the stream holds the patched
// of each, it stores none. When statusagg wakes, it has the backlog of
// every event to apply, and its
// watchdog finds the sandboxes that were in a stage at the stop past their
// deadlines (hooks of 10s: PreUpgrade 20s, PostUpgrade 15s) and re-drives
// them. Nothing may double or run on a wrong pod: the ops completes
// 20/20/0/0, each pod is created once, preUpgrade runs exactly once per
// sandbox on its original pod, postUpgrade exactly once on the new pod, and
// every workspace survives.
func TestStatusaggStoppedLongerThanTheDuplicateWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test: skipped with -short")
	}
	const (
		sandboxes = 20
		window    = 10 * time.Second
		stopFor   = 25 * time.Second
		opsName   = "ss"
		pool      = "ss-pool"
		image     = "my-registry/sandbox-image:v2"
	)
	rng := faultSeed(t)
	env := testenv.Get(t)
	ns := env.Namespace(t)
	nc := natsProcess(t)
	s := OwnStack(t, stackOptions{natsURL: nc.URL, env: []string{
		"MOLT_DUPLICATE_WINDOW=" + window.String(), "MOLT_SELECTOR_REPUBLISH_AFTER=3s",
	}})
	t.Logf("namespace %s; service logs in %s", ns, s.cfg.LogDir())
	if got := streamDuplicates(t, nc.URL); got != window {
		t.Fatalf("the stream's duplicate window is %s, want %s (MOLT_DUPLICATE_WINDOW)", got, window)
	}

	names := workspaceSandboxes(t, s, ns, "ss", pool, "/mnt/shared", "/data/"+ns+"/$NAME/shared", sandboxes)
	markOriginals(t, s, ns, names)
	oldUID := podUIDs(t, s, ns, names)
	w := watch(t, s, ns)

	kubectl(t, chaosOpsYAMLFor(opsName, pool, "3", image, 10), "apply", "-n", ns, "-f", "-")
	runStart := time.Now()
	waitUpdated(t, s, ns, opsName, int32(3+rng.Intn(4)), 2*time.Minute)
	time.Sleep(time.Duration(rng.Int63n(int64(time.Second))))

	s.Signal(t, "statusagg", syscall.SIGSTOP)
	stoppedAt := time.Now()
	claimedAtStop, storedAtStop := claimedAndRequested(t, s, ns, opsName)
	t.Logf("SIGSTOP statusagg at +%s (updated %d, %d claimed); continuing it in %s",
		stoppedAt.Sub(runStart).Round(time.Millisecond), opsUpdated(s, ns, opsName), claimedAtStop, stopFor)
	kubectl(t, "", "patch", "suo", opsName, "-n", ns, "--type=merge", "-p", `{"spec":{"updateStrategy":{"maxUnavailable":8}}}`)
	time.Sleep(time.Until(stoppedAt.Add(stopFor)))
	claimedNow, storedNow := claimedAndRequested(t, s, ns, opsName)
	admitted := claimedNow - claimedAtStop
	copies := storedNow - storedAtStop - admitted
	s.Signal(t, "statusagg", syscall.SIGCONT)
	t.Logf("SIGCONT statusagg after %s; meanwhile the selector admitted %d sandboxes and stored %d more copies of their requested",
		time.Since(stoppedAt).Round(time.Millisecond), admitted, copies)
	if admitted == 0 {
		t.Errorf("while statusagg was stopped the selector admitted no sandbox: the test proves nothing")
	}
	if copies != 0 {
		t.Errorf("while statusagg was stopped the selector stored %d copies of requested after the %s duplicate window, for attempts the stream shows went on: each runs its stages again", copies, window)
	}

	final := waitEnded(t, s, ns, opsName, 3*time.Minute)
	t.Logf("ops ended after %s", time.Since(runStart).Round(time.Second))
	assertCounters(t, final, sandboxes)
	_, _, adds := w.snapshot()
	problems := map[string][]string{}
	for _, n := range names {
		problems[n] = hookedUpgradeProblems(t, s, ns, n, hookedUpgrade{image: image, oldUID: oldUID[n], adds: adds[n], onePost: true})
	}
	reportProblems(t, s, problems)
	assertNoneExited(t, s)
}

// recreatedOnce lists, per sandbox, what is wrong with its pod after an
// upgrade to image: exactly one pod was created for it (adds, from a
// watcher), it is the pod that runs now, not the one before (oldUID), and it
// runs image.
func recreatedOnce(t *testing.T, s *stack, ns string, names []string, oldUID map[string]string, adds map[string][]string, image string) map[string][]string {
	t.Helper()
	problems := map[string][]string{}
	for _, n := range names {
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{})
		switch {
		case err != nil:
			problems[n] = append(problems[n], fmt.Sprintf("get pod: %v", err))
		case len(adds[n]) != 1:
			problems[n] = append(problems[n], fmt.Sprintf("%d pods created, want exactly 1 (%v)", len(adds[n]), adds[n]))
		case adds[n][0] != string(pod.UID) || string(pod.UID) == oldUID[n]:
			problems[n] = append(problems[n], fmt.Sprintf("pod now %s; created during the upgrade %v; before %s", pod.UID, adds[n], oldUID[n]))
		case pod.Spec.Containers[0].Image != image:
			problems[n] = append(problems[n], fmt.Sprintf("pod image %s, want %s", pod.Spec.Containers[0].Image, image))
		}
	}
	return problems
}

// A preUpgrade that succeeds while NATS is down, on a pod that is deleted
// before NATS is back, still counts: its report reaches the stream once NATS
// is back (the client holds it through the outage, and hookrunner sends it
// again while JetStream refuses it, up to 5 minutes), so the attempt goes on
// from that backup and postUpgrade restores it into the new pod. Were the
// report lost, the redelivery would find the pod, and the done mark on it,
// gone and file PreUpgradeFailed, and a resume's preUpgrade would back the
// empty pod built next up over the workspace's only backup.
func TestBackupMadeDuringANATSOutageSurvivesItsPodsDeletion(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test: skipped with -short")
	}
	ctx := context.Background()
	nc := natsProcess(t)
	s := OwnStack(t, stackOptions{natsURL: nc.URL})
	ns := s.env.Namespace(t)
	workspaceSandboxes(t, s, ns, "nb", "nb-pool", "/mnt/shared", "/data/"+ns+"/$NAME/shared", 1)
	const name = "nb-00"
	old, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pre := "sleep 4; " + backupHook + " && touch /mnt/shared/backed-up"
	kubectl(t, hookOps("nb", "nb-pool", "my-registry/sandbox-image:v2", pre, restoreHook, 60), "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, time.Minute, name+" in PreUpgrade", func() (bool, error) {
		c := upgradingCondition(t, s, ns, name)
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonPreUpgrade, fmt.Errorf("Upgrading %+v", c)
	})
	if err := nc.Kill9(); err != nil {
		t.Fatal(err)
	}
	t.Log("nats-server killed while preUpgrade runs")
	testenv.Eventually(t, time.Minute, "the backup of "+name, func() (bool, error) {
		_, code := sh(t, s, ns, name, "test -e /mnt/shared/backed-up")
		return code == 0, fmt.Errorf("test -e /mnt/shared/backed-up: exit %d", code)
	})
	// The ops says why nothing moves (statusagg's NATS connection has been
	// down for longer than its grace), in its status and in kubectl molt.
	testenv.Eventually(t, time.Minute, "ops nb saying NATS is unreachable", func() (bool, error) {
		ops, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "nb", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionEventStreamUnavailable)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, nc.URL), fmt.Errorf("EventStreamUnavailable %+v", c)
	})
	if out, stderr, code := molt(t, "", "status", "nb", "-n", ns); !strings.Contains(out, "has not reached NATS") {
		t.Errorf("kubectl molt status nb during the outage (exit %d) does not say NATS is unreachable:\n%s%s", code, out, stderr)
	}
	// Past the 15s a report was tried for before: nothing shows that
	// hookrunner gave up, so the test waits that long.
	time.Sleep(20 * time.Second)
	if err := s.env.Kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &old.UID}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "pod "+name+" (uid "+string(old.UID)+") gone", func() (bool, error) {
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return pod.UID != old.UID, fmt.Errorf("pod uid %s", pod.UID)
	})
	if err := nc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Log("nats-server started again")
	ops := waitEnded(t, s, ns, "nb", 3*time.Minute)
	if ops.Status.Phase != agentsv1alpha1.SandboxUpdateOpsCompleted {
		t.Fatalf("ops nb %s (Upgrading of %s: %+v), want Completed", ops.Status.Phase, name, upgradingCondition(t, s, ns, name))
	}
	if got := workspaceFile(t, s, ns, name); got != "data-"+name {
		t.Fatalf("workspace of %s after the upgrade = %q, want the backed-up data-%s", name, got, name)
	}
	if c := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionEventStreamUnavailable); c != nil {
		t.Errorf("ops nb ended with %+v, want it gone once NATS was back", c)
	}
}
