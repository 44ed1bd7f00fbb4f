package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

const (
	chaosSandboxes = 60
	chaosKills     = 12
	chaosOps       = "chaos"
	chaosPool      = "chaos-pool"
	chaosImage     = "my-registry/sandbox-image:v2"

	// chaosPreHook records, on the persistent volume, that it ran and on
	// which pod (the original pod carries /root/.molt-original, a new pod
	// does not), then backs the pod-local workspace up.
	chaosPreHook = `echo "pre $(hostname) $(cat /root/.molt-original 2>/dev/null || echo NEW) $(date +%s.%N)" >> /mnt/shared/pre-runs; ` +
		`sleep 1; tar czf /mnt/shared/ws.tgz -C /home/user/workspace .`
	// chaosPostHook records the same on the persistent volume and restores
	// the workspace. It keeps the archive so that a re-run is harmless.
	chaosPostHook = `echo "post $(hostname) $(cat /root/.molt-original 2>/dev/null || echo NEW) $(date +%s.%N)" >> /mnt/shared/pre-runs; ` +
		`tar xzf /mnt/shared/ws.tgz -C /home/user/workspace`
)

// chaosOpsYAML is hookOps with a maxUnavailable of our own.
func chaosOpsYAML(maxUnavailable string) string {
	return chaosOpsYAMLFor(chaosOps, chaosPool, maxUnavailable, chaosImage, 30)
}

// chaosOpsYAMLFor is chaosOpsYAML for any ops name, pool, image and hook
// timeoutSeconds.
func chaosOpsYAMLFor(name, pool, maxUnavailable, image string, hookTimeout int) string {
	y := opsYAML(name, pool, maxUnavailable, image)
	y += "  lifecycle:\n"
	for _, h := range []struct{ name, script string }{{"preUpgrade", chaosPreHook}, {"postUpgrade", chaosPostHook}} {
		y += fmt.Sprintf("    %s:\n      exec:\n        command: [\"/bin/bash\", \"-c\", %q]\n      timeoutSeconds: %d\n", h.name, h.script, hookTimeout)
	}
	return y
}

// chaosHookLine is one line the hooks wrote to /mnt/shared/pre-runs.
type chaosHookLine struct {
	kind, host, marker string
	ts                 float64
	raw                string
}

func parseChaosHookLines(out string) ([]chaosHookLine, []string) {
	var lines []chaosHookLine
	var bad []string
	for _, raw := range strings.Split(strings.TrimSpace(out), "\n") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		f := strings.Fields(raw)
		if len(f) != 4 {
			bad = append(bad, raw)
			continue
		}
		ts, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			bad = append(bad, raw)
			continue
		}
		lines = append(lines, chaosHookLine{kind: f[0], host: f[1], marker: f[2], ts: ts, raw: raw})
	}
	return lines, bad
}

// updatedSampler polls the ops' status.updatedReplicas and records every
// decrease.
type updatedSampler struct {
	mu        sync.Mutex
	last      int32
	samples   int
	decreases []string
	stop      chan struct{}
	done      chan struct{}
}

func sampleUpdated(s *stack, ns, name string, every time.Duration) *updatedSampler {
	u := &updatedSampler{last: -1, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(u.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, name, metav1.GetOptions{})
			cancel()
			if err == nil {
				cur := o.Status.UpdatedReplicas
				u.mu.Lock()
				u.samples++
				if u.last >= 0 && cur < u.last {
					u.decreases = append(u.decreases, fmt.Sprintf("%s: %d -> %d (phase %s, status %+v)",
						time.Now().Format("15:04:05.000"), u.last, cur, o.Status.Phase, o.Status))
				}
				u.last = cur
				u.mu.Unlock()
			}
			select {
			case <-u.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return u
}

// sawFinal waits, up to timeout, until the sampler has read want (the
// ops's last updatedReplicas), so that the last counter write is sampled
// before the sampler stops.
func (u *updatedSampler) sawFinal(t *testing.T, want int32, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("the sampler reads updatedReplicas %d", want), func() (bool, error) {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.last == want, fmt.Errorf("last sampled %d", u.last)
	})
}

func (u *updatedSampler) finish() (samples int, decreases []string) {
	close(u.stop)
	<-u.done
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.samples, append([]string(nil), u.decreases...)
}

// chaosLogLines returns up to max lines of the services' logs that mention
// any of needles (for the report of a failed invariant).
func chaosLogLines(s *stack, needles []string, max int) []string {
	var out []string
	for _, svc := range serviceNames {
		f, err := os.Open(filepath.Join(s.cfg.LogDir(), svc+".log"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			for _, n := range needles {
				if strings.Contains(line, n) {
					out = append(out, svc+": "+line)
					break
				}
			}
		}
		f.Close()
	}
	if len(out) > max {
		out = append(out[:max], fmt.Sprintf("... %d more", len(out)-max))
	}
	return out
}

// chaosReviveCrashed restarts every service that exited on its own (as its
// Deployment would) and fails the test for it: no service may die unless
// the chaos kills it. It returns the services it restarted.
func chaosReviveCrashed(t *testing.T, s *stack, reported map[string]int) []string {
	t.Helper()
	var revived []string
	for _, name := range serviceNames {
		s.mu.Lock()
		p := s.procs[name]
		s.mu.Unlock()
		if !p.Exited() {
			continue
		}
		reported[name]++
		if reported[name] == 1 {
			t.Errorf("%s exited on its own (%v); its log %s ends with:\n%s", name, p.Cmd.ProcessState, p.LogPath, chaosLogTail(p.LogPath, 25))
		}
		if err := s.start(name); err != nil {
			t.Fatalf("restart %s: %v", name, err)
		}
		if err := s.waitReady(name); err != nil {
			t.Fatal(err)
		}
		revived = append(revived, name)
	}
	return revived
}

// chaosLogTail is the last n lines of a log file.
func chaosLogTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestChaosKill9KeepsEveryInvariant (issue 7 "Chaos"): 60 sandboxes with
// backup/restore hooks upgrade 20% at a time while a random service is
// killed with SIGKILL and restarted, twelve times, at random moments. The
// upgrade still completes with exact counters, every pod is recreated
// exactly once, every backup ran exactly once and on the original pod
// (before the new pod existed), every restore ran on the new pod, every
// workspace survives and updatedReplicas never goes down.
//
// Replay a run with MOLT_CHAOS_SEED=<the logged seed>.
func TestChaosKill9KeepsEveryInvariant(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: skipped with -short")
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv("MOLT_CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("MOLT_CHAOS_SEED=%q: %v", v, err)
		}
	}
	t.Logf("chaos seed %d", seed)
	rng := rand.New(rand.NewSource(seed))

	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	t.Logf("namespace %s; service logs in %s", ns, s.cfg.LogDir())
	start := time.Now()

	names := workspaceSandboxes(t, s, ns, "chaos", chaosPool, "/mnt/shared", "/data/$NAME/shared", chaosSandboxes)
	oldUID := map[string]string{}
	for _, n := range names {
		if _, code := sh(t, s, ns, n, "echo original > /root/.molt-original"); code != 0 {
			t.Fatalf("write the original marker into %s: exit %d", n, code)
		}
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get pod %s: %v", n, err)
		}
		oldUID[n] = string(pod.UID)
	}
	t.Logf("%d sandboxes ready with workspaces and markers after %s", len(names), time.Since(start).Round(time.Second))

	w := watch(t, s, ns)
	kubectl(t, chaosOpsYAML("20%"), "apply", "-n", ns, "-f", "-")
	opsStart := time.Now()
	sampler := sampleUpdated(s, ns, chaosOps, 500*time.Millisecond)
	samplerDone := false
	defer func() {
		if !samplerDone {
			sampler.finish()
		}
	}()

	opsPhase := func() (agentsv1alpha1.SandboxUpdateOpsPhase, agentsv1alpha1.SandboxUpdateOpsStatus) {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, chaosOps, metav1.GetOptions{})
		if err != nil {
			return "", agentsv1alpha1.SandboxUpdateOpsStatus{}
		}
		return o.Status.Phase, o.Status
	}
	terminal := func(p agentsv1alpha1.SandboxUpdateOpsPhase) bool {
		return p == agentsv1alpha1.SandboxUpdateOpsCompleted || p == agentsv1alpha1.SandboxUpdateOpsFailed
	}

	// The chaos: twelve kill -9s of a random service at random moments,
	// until the ops ends.
	kills := 0
	crashed := map[string]int{} // services that died without being killed
	for i := 0; i < chaosKills; i++ {
		time.Sleep(time.Duration(rng.Int63n(int64(3 * time.Second))))
		victim := serviceNames[rng.Intn(len(serviceNames))]
		phase, st := opsPhase()
		if terminal(phase) {
			t.Logf("ops %s after %d kills; no more chaos", phase, kills)
			break
		}
		chaosReviveCrashed(t, s, crashed)
		t.Logf("kill -9 #%d: %s at +%s (updated %d, updating %d, failed %d)", i+1, victim,
			time.Since(opsStart).Round(time.Millisecond), st.UpdatedReplicas, st.UpdatingReplicas, st.FailedReplicas)
		s.Kill9AndRestart(t, victim)
		kills++
	}

	// The end: Completed, or Failed (reported, and every other invariant
	// still checked).
	var final *agentsv1alpha1.SandboxUpdateOps
	deadline := time.Now().Add(8 * time.Minute)
	for {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, chaosOps, metav1.GetOptions{})
		if err == nil {
			final = o
			if terminal(o.Status.Phase) {
				break
			}
		}
		if time.Now().After(deadline) {
			break
		}
		chaosReviveCrashed(t, s, crashed)
		time.Sleep(500 * time.Millisecond)
	}
	if final != nil {
		sampler.sawFinal(t, final.Status.UpdatedReplicas, 10*time.Second)
	}
	samples, decreases := sampler.finish()
	samplerDone = true
	chaosReviveCrashed(t, s, crashed)
	for name, n := range crashed {
		t.Errorf("%s exited on its own %d times during the run (restarted each time)", name, n)
	}
	t.Logf("ops ended after %s (%d kills, %d samples of updatedReplicas)", time.Since(opsStart).Round(time.Second), kills, samples)

	suspects := map[string][]string{}
	suspect := func(name, why string) {
		suspects[name] = append(suspects[name], why)
		t.Errorf("%s: %s", name, why)
	}

	if final == nil {
		t.Fatalf("ops %s could not be read", chaosOps)
	}
	st := final.Status
	if st.Phase != agentsv1alpha1.SandboxUpdateOpsCompleted {
		t.Errorf("ops phase = %q after 8m, want Completed; status %+v", st.Phase, st)
		for _, c := range st.Conditions {
			t.Logf("ops condition %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	if st.Replicas != chaosSandboxes || st.UpdatedReplicas != chaosSandboxes || st.UpdatingReplicas != 0 || st.FailedReplicas != 0 {
		t.Errorf("ops status = replicas %d updated %d updating %d failed %d, want %d %d 0 0",
			st.Replicas, st.UpdatedReplicas, st.UpdatingReplicas, st.FailedReplicas, chaosSandboxes, chaosSandboxes)
	}
	for _, d := range decreases {
		t.Errorf("updatedReplicas decreased: %s", d)
	}

	_, _, adds := w.snapshot()
	for _, n := range names {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			suspect(n, fmt.Sprintf("get sandbox: %v", err))
			continue
		}
		if c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonSucceeded {
			suspect(n, fmt.Sprintf("Upgrading condition = %+v, phase %s, want Succeeded", c, sb.Status.Phase))
		}
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			suspect(n, fmt.Sprintf("get pod: %v", err))
			continue
		}
		if len(adds[n]) != 1 {
			suspect(n, fmt.Sprintf("%d pods created, want exactly 1 (%v)", len(adds[n]), adds[n]))
		} else if adds[n][0] != string(pod.UID) {
			suspect(n, fmt.Sprintf("the pod created during the upgrade (%s) is not the pod now (%s)", adds[n][0], pod.UID))
		}
		if string(pod.UID) == oldUID[n] {
			suspect(n, "pod was not recreated")
			continue
		}
		if img := pod.Spec.Containers[0].Image; img != chaosImage {
			suspect(n, fmt.Sprintf("pod image %s, want %s", img, chaosImage))
		}

		out, code := sh(t, s, ns, n, "cat /mnt/shared/pre-runs")
		if code != 0 {
			suspect(n, fmt.Sprintf("cat /mnt/shared/pre-runs: exit %d", code))
			continue
		}
		lines, bad := parseChaosHookLines(out)
		for _, b := range bad {
			suspect(n, fmt.Sprintf("malformed hook line %q", b))
		}
		var pres, posts []chaosHookLine
		for _, l := range lines {
			if l.host != n {
				suspect(n, fmt.Sprintf("hook line from another host: %q", l.raw))
			}
			switch l.kind {
			case "pre":
				pres = append(pres, l)
			case "post":
				posts = append(posts, l)
			default:
				suspect(n, fmt.Sprintf("unknown hook line %q", l.raw))
			}
		}
		created := pod.CreationTimestamp.Unix()
		if len(pres) != 1 {
			suspect(n, fmt.Sprintf("%d preUpgrade runs, want exactly 1:\n%s", len(pres), out))
		}
		for _, p := range pres {
			if p.marker != "original" {
				suspect(n, fmt.Sprintf("preUpgrade ran on a new pod, not the original: %q", p.raw))
			}
			if p.ts > float64(created)+1 {
				suspect(n, fmt.Sprintf("preUpgrade at %.3f is later than the new pod's creationTimestamp %s (%d) + 1s: %q",
					p.ts, pod.CreationTimestamp.UTC().Format(time.RFC3339), created, p.raw))
			}
		}
		if len(posts) == 0 {
			suspect(n, fmt.Sprintf("postUpgrade never ran:\n%s", out))
		}
		for _, p := range posts {
			if p.marker != "NEW" {
				suspect(n, fmt.Sprintf("postUpgrade ran on the original pod, not the new one: %q", p.raw))
			}
		}
		if got := workspaceFile(t, s, ns, n); got != "data-"+n {
			suspect(n, fmt.Sprintf("workspace file after the upgrade = %q, want data-%s", got, n))
		}
	}

	if !t.Failed() {
		t.Logf("every invariant held: %d sandboxes, %d kills, seed %d", len(names), kills, seed)
		return
	}
	// The report: what went wrong where, with the services' log lines.
	t.Logf("chaos seed %d (replay with MOLT_CHAOS_SEED=%d); service logs in %s", seed, seed, s.cfg.LogDir())
	bad := make([]string, 0, len(suspects))
	for n := range suspects {
		bad = append(bad, n)
	}
	sort.Strings(bad)
	t.Logf("%d sandboxes broke an invariant: %v", len(bad), bad)
	for i, n := range bad {
		if i == 3 {
			break
		}
		// A sandbox's name ends in two digits; match it with a closing
		// quote so chaos-1 does not match chaos-10.
		for _, l := range chaosLogLines(s, []string{`"` + n + `"`, n + `"`, "/" + n + " ", "/" + n + `"`}, 60) {
			t.Logf("log %s: %s", n, l)
		}
	}
}
