package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"molt.dev/dev/devruntime"
	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// The faults run (--faults) asks at scale what the e2e chaos test asks of 60
// sandboxes: n sandboxes with a backup/restore pair of hooks upgrade at
// maxUnavailable 100% while molt's five services and NATS are killed with
// SIGKILL in turn and started again; optionally one of the NATS kills also
// removes its store, as a NATS without a persistent volume would lose it.
// Then every invariant is checked per sandbox. Unlike the shapes it asserts:
// a broken invariant makes molt-bench exit non-zero.

// faultsImage is the image the faults run's patch moves to.
const faultsImage = "my-registry/sandbox-image:v2"

// The hooks record, on the sandbox's persistent volume, that they ran and on
// which pod (the original pod carries /root/.molt-original, a new one does
// not); the backup archives the pod-local workspace, the restore unpacks it.
const (
	faultsPreHook = `echo "pre $(hostname) $(cat /root/.molt-original 2>/dev/null || echo NEW) $(date +%%s.%%N)" >> /mnt/shared/hook-runs; ` +
		`sleep %d; tar czf /mnt/shared/ws.tgz -C /home/user/workspace .`
	faultsPostHook = `echo "post $(hostname) $(cat /root/.molt-original 2>/dev/null || echo NEW) $(date +%s.%N)" >> /mnt/shared/hook-runs; ` +
		`tar xzf /mnt/shared/ws.tgz -C /home/user/workspace`
)

// faultVictims are killed in this order, round after round.
var faultVictims = []string{"podcycler", "hookrunner", "statusagg", "nats-server", "patcher", "selector"}

type faultsConfig struct {
	n           int
	every, down time.Duration
	maxKills    int
	wipeNATS    bool
	hookSeconds int
	out         string
}

// faultKill is one SIGKILL of the run.
type faultKill struct {
	at     time.Duration // since the ops was created
	victim string
	wiped  bool
	err    string
}

// faultsRun runs the faults check and writes its report; the error is
// non-nil when the run could not be done or an invariant broke.
func (b *bench) faultsRun(ctx context.Context, runID string, fc faultsConfig) error {
	ns := "bench-" + runID + "-faults"
	procs, err := newKiller(b.cfg.pidDir)
	if err != nil {
		return err
	}
	fmt.Printf("faults: creating %d sandboxes with workspaces in %s\n", fc.n, ns)
	names, oldUID, err := b.faultsSetup(ctx, ns, fc.n)
	if err != nil {
		return err
	}
	if err := b.waitNamespacesGone(ctx, []string{ns}); err != nil {
		return err
	}
	created, stopWatch, err := b.watchPodUIDs(ctx, ns, oldUID)
	if err != nil {
		return err
	}
	defer stopWatch()

	start := time.Now()
	if _, err := b.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Create(ctx, faultsOps(ns, fc.hookSeconds), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ops in %s: %w", ns, err)
	}
	sampler := b.sampleUpdated(ctx, ns)

	var kills []faultKill
	var final *agentsv1alpha1.SandboxUpdateOps
	wipeAt := -1
	if fc.wipeNATS {
		// The first NATS kill after the first round: the run is well under way.
		wipeAt = len(faultVictims) + indexOf(faultVictims, "nats-server")
	}
	next := time.Now().Add(fc.every)
	deadline := start.Add(b.cfg.timeout)
	for {
		o, err := b.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "faults", metav1.GetOptions{})
		if err == nil {
			final = o
			if terminalOps(o.Status.Phase) {
				break
			}
		}
		if time.Now().After(deadline) {
			break
		}
		if err := procs.reviveCrashed(); err != nil {
			return err
		}
		if len(kills) < fc.maxKills && time.Now().After(next) {
			victim := faultVictims[len(kills)%len(faultVictims)]
			wipe := len(kills) == wipeAt
			k := faultKill{at: time.Since(start), victim: victim, wiped: wipe}
			if err := procs.kill9AndRestart(victim, fc.down, wipe); err != nil {
				k.err = err.Error()
			}
			fmt.Printf("  kill -9 #%d %s at +%s%s\n", len(kills)+1, victim, k.at.Round(time.Millisecond), map[bool]string{true: " (store removed)"}[wipe])
			kills = append(kills, k)
			next = time.Now().Add(fc.every)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	wall := time.Since(start)
	if err := procs.reviveCrashed(); err != nil {
		return err
	}
	decreases := sampler.finish()
	fmt.Printf("faults: ops %s after %s and %d kills; checking every sandbox\n", phaseOf(final), wall.Round(time.Second), len(kills))

	rep := &faultsReport{cfg: fc, ns: ns, wall: wall, kills: kills, crashed: procs.crashed, final: final, decreases: decreases}
	rep.check(ctx, b, names, oldUID, created())
	if err := os.WriteFile(fc.out, []byte(rep.markdown()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", fc.out, err)
	}
	fmt.Printf("faults: report written to %s\n", fc.out)
	if n := rep.broken(); n > 0 {
		return fmt.Errorf("faults: %d invariants broken (namespace %s kept; report %s)", n, ns, fc.out)
	}
	if err := b.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	return nil
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func terminalOps(p agentsv1alpha1.SandboxUpdateOpsPhase) bool {
	return p == agentsv1alpha1.SandboxUpdateOpsCompleted || p == agentsv1alpha1.SandboxUpdateOpsFailed
}

func phaseOf(o *agentsv1alpha1.SandboxUpdateOps) string {
	if o == nil {
		return "unread"
	}
	return string(o.Status.Phase)
}

// faultsOps moves every sandbox of ns to faultsImage at once, with the
// recording backup and restore hooks.
func faultsOps(ns string, hookSeconds int) *agentsv1alpha1.SandboxUpdateOps {
	mu := intstr.FromString("100%")
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "faults", Namespace: ns}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"bench": ns}}
	ops.Spec.UpdateStrategy.MaxUnavailable = &mu
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"` + faultsImage + `"}]}}`)}
	hook := func(script string) *agentsv1alpha1.UpgradeAction {
		return &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/bash", "-c", script}}, TimeoutSeconds: int32(hookSeconds + 60)}
	}
	ops.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook(fmt.Sprintf(faultsPreHook, hookSeconds)), PostUpgrade: hook(faultsPostHook)}
	return ops
}

// faultsSetup creates n Running sandboxes whose container mounts a
// persistent hostPath volume at /mnt/shared and a pod-local workspace, writes
// a file into each workspace and the original-pod marker, and returns the
// names and the original pods' UIDs.
func (b *bench) faultsSetup(ctx context.Context, ns string, n int) ([]string, map[string]string, error) {
	if err := b.setupWith(ctx, ns, n, func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.Runtimes = []agentsv1alpha1.RuntimeConfig{{Name: "agent-runtime"}}
		c := &sb.Spec.Template.Spec.Containers[0]
		c.VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/mnt/shared"}, {Name: "workspace", MountPath: "/home/user/workspace"}}
		sb.Spec.Template.Spec.Volumes = []corev1.Volume{
			{Name: "shared", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/" + ns + "/" + sb.Name}}},
			{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}
	}); err != nil {
		return nil, nil, err
	}
	if err := b.waitPhase(ctx, ns, n, agentsv1alpha1.SandboxRunning); err != nil {
		return nil, nil, err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = sandboxName(i)
	}
	oldUID := make(map[string]string, n)
	var mu sync.Mutex
	err := parallel(ctx, n, 16, func(i int) error {
		name := names[i]
		if _, err := b.sh(ctx, ns, name, "mkdir -p /home/user/workspace/sub && echo data-$(hostname) > /home/user/workspace/sub/file.txt && echo original > /root/.molt-original"); err != nil {
			return fmt.Errorf("seed the workspace of %s/%s: %w", ns, name, err)
		}
		pod, err := b.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get pod %s/%s: %w", ns, name, err)
		}
		mu.Lock()
		oldUID[name] = string(pod.UID)
		mu.Unlock()
		return nil
	})
	return names, oldUID, err
}

// sh runs a bash script in a sandbox through its agent-runtime, as the
// hookrunner does, retrying for up to 30s while the runtime does not answer;
// a non-zero exit is an error.
func (b *bench) sh(ctx context.Context, ns, name, script string) (string, error) {
	var last error
	for try := 0; try < 30; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(time.Second):
			}
		}
		url, token, err := devruntime.SandboxEndpoint(ctx, b.kube, b.agents, ns, name)
		if err != nil {
			last = err
			continue
		}
		res, err := agentruntime.Exec(ctx, agentruntime.ExecRequest{BaseURL: url, AccessToken: token, Command: []string{"/bin/bash", "-c", script}, Timeout: 20 * time.Second})
		if err != nil {
			last = err
			continue
		}
		if res.ExitCode != 0 {
			return res.Stdout, fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
		}
		return res.Stdout, nil
	}
	return "", last
}

// watchPodUIDs records, from now on, every UID each pod name of ns shows
// other than its original one: the pods created during the run. created
// returns a copy.
func (b *bench) watchPodUIDs(ctx context.Context, ns string, oldUID map[string]string) (created func() map[string][]string, stop func(), err error) {
	var mu sync.Mutex
	seen := map[string][]string{}
	note := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || string(pod.UID) == oldUID[pod.Name] {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, u := range seen[pod.Name] {
			if u == string(pod.UID) {
				return
			}
		}
		seen[pod.Name] = append(seen[pod.Name], string(pod.UID))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(b.kube, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) }}); err != nil {
		return nil, nil, fmt.Errorf("watch pods of %s: %w", ns, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	factory.Start(wctx.Done())
	if !cache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
		cancel()
		return nil, nil, fmt.Errorf("watch pods of %s: cache did not sync", ns)
	}
	created = func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string][]string, len(seen))
		for k, v := range seen {
			out[k] = append([]string(nil), v...)
		}
		return out
	}
	return created, func() { cancel(); factory.Shutdown() }, nil
}

// updatedSampler reads the ops' updatedReplicas twice a second and records
// every decrease.
type updatedSampler struct {
	mu        sync.Mutex
	decreases []string
	cancel    func()
	done      chan struct{}
}

func (b *bench) sampleUpdated(ctx context.Context, ns string) *updatedSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &updatedSampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		last := int32(-1)
		for ctx.Err() == nil {
			if o, err := b.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "faults", metav1.GetOptions{}); err == nil {
				if cur := o.Status.UpdatedReplicas; cur < last {
					s.mu.Lock()
					s.decreases = append(s.decreases, fmt.Sprintf("%s: %d → %d", time.Now().Format("15:04:05.000"), last, cur))
					s.mu.Unlock()
				} else {
					last = cur
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *updatedSampler) finish() []string {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.decreases...)
}

// killer kills and restarts the local stack's processes by their pid files
// (.molt/pids), with the command line and environment each was started
// with, and keeps the pid files current so `make down` stops the new ones.
type killer struct {
	pidDir  string
	logDir  string
	mu      sync.Mutex
	started map[string]*startedProc // processes this run started, by name
	crashed map[string]int          // processes that died without being killed
	images  map[string]procImageOf  // how each victim is started
}

type startedProc struct {
	pid    int
	exited chan struct{}
}

// newKiller reads the command line and environment of every victim now, so
// that one that dies on its own can be started again.
func newKiller(pidDir string) (*killer, error) {
	k := &killer{pidDir: pidDir, logDir: filepath.Join(filepath.Dir(pidDir), "logs"), started: map[string]*startedProc{},
		crashed: map[string]int{}, images: map[string]procImageOf{}}
	for _, name := range faultVictims {
		pid, _, err := k.pidOf(name)
		if err != nil {
			return nil, fmt.Errorf("%w (is the local stack up? make up)", err)
		}
		argv, env, err := procImage(pid)
		if err != nil {
			return nil, fmt.Errorf("read the command line of %s (pid %d): %w", name, pid, err)
		}
		k.images[name] = procImageOf{argv, env}
	}
	return k, nil
}

// procImageOf is how a process was started.
type procImageOf struct{ argv, env []string }

func (k *killer) pidOf(name string) (int, string, error) {
	data, err := os.ReadFile(filepath.Join(k.pidDir, name+".pid"))
	if err != nil {
		return 0, "", err
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0, "", fmt.Errorf("pid file of %s: %q is not \"<pid> <binary>\"", name, data)
	}
	pid, err := strconv.Atoi(f[0])
	return pid, f[1], err
}

// alive says whether name's process runs (a process this run started is
// alive until its Wait returns; another one while /proc shows it and it is
// not a zombie).
func (k *killer) alive(name string, pid int) bool {
	k.mu.Lock()
	p := k.started[name]
	k.mu.Unlock()
	if p != nil && p.pid == pid {
		select {
		case <-p.exited:
			return false
		default:
			return true
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// kill9AndRestart sends SIGKILL to name, waits for it to be gone, removes
// NATS's store when wipe is set, and after down starts it again as it was.
func (k *killer) kill9AndRestart(name string, down time.Duration, wipe bool) error {
	pid, _, err := k.pidOf(name)
	if err != nil {
		return err
	}
	img := k.images[name]
	proc, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 %s (pid %d): %w", name, pid, err)
	}
	for i := 0; i < 100 && k.alive(name, pid); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if wipe {
		if dir := flagValue(img.argv, "-sd"); dir != "" {
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("remove the NATS store %s: %w", dir, err)
			}
		}
	}
	time.Sleep(down)
	return k.start(name)
}

// reviveCrashed starts again every process of faultVictims that is not
// running, counting it as crashed: only the run's own kills may stop one.
// Several gone at once, or a pid file gone, is the stack being stopped
// (make down) rather than a crash: it starts nothing then and says so.
func (k *killer) reviveCrashed() error {
	var dead []string
	for _, name := range faultVictims {
		pid, _, err := k.pidOf(name)
		if err != nil {
			return fmt.Errorf("the pid file of %s is gone (%v): the local stack is being stopped; the run ends", name, err)
		}
		if !k.alive(name, pid) {
			dead = append(dead, name)
		}
	}
	if len(dead) > 1 {
		return fmt.Errorf("%s are all gone at once: the local stack is being stopped (make down?); the run ends", strings.Join(dead, ", "))
	}
	for _, name := range dead {
		k.mu.Lock()
		k.crashed[name]++
		k.mu.Unlock()
		fmt.Printf("  %s exited on its own; starting it again\n", name)
		if err := k.start(name); err != nil {
			fmt.Printf("  %v\n", err)
		}
	}
	return nil
}

// start starts name as it was started before, detached (in its own session,
// so it outlives the bench), logging where it logged, and writes its pid file.
func (k *killer) start(name string) error {
	img := k.images[name]
	logFile, err := os.OpenFile(filepath.Join(k.logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s again: %w", name, err)
	}
	defer logFile.Close()
	cmd := exec.Command(img.argv[0], img.argv[1:]...)
	cmd.Env = img.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s again: %w", name, err)
	}
	p := &startedProc{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	k.mu.Lock()
	k.started[name] = p
	k.mu.Unlock()
	return os.WriteFile(filepath.Join(k.pidDir, name+".pid"), []byte(fmt.Sprintf("%d %s\n", p.pid, img.argv[0])), 0o644)
}

// procImage reads a process's command line and environment from /proc.
func procImage(pid int) (argv, env []string, err error) {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, nil, err
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil, nil, err
	}
	split := func(b []byte) []string { return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00") }
	argv = split(cmdline)
	if len(argv) == 0 || argv[0] == "" {
		return nil, nil, fmt.Errorf("empty command line")
	}
	return argv, split(environ), nil
}

// flagValue is the value after flag in argv ("-sd DIR"), or "".
func flagValue(argv []string, flag string) string {
	for i, a := range argv {
		if a == flag && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}

// faultsReport is what the faults run found.
type faultsReport struct {
	cfg       faultsConfig
	ns        string
	wall      time.Duration
	kills     []faultKill
	crashed   map[string]int
	final     *agentsv1alpha1.SandboxUpdateOps
	decreases []string
	// violations by invariant, each a list of "sandbox: what".
	violations map[string][]string
	checked    int
}

// The invariants, in the report's order.
var faultInvariants = []string{
	"the ops ends Completed with exact counters",
	"updatedReplicas never goes down",
	"no service exits unless killed",
	"the sandbox ends Succeeded",
	"its pod is recreated exactly once, on the new image",
	"preUpgrade runs exactly once, on the original pod, before the new pod exists",
	"postUpgrade runs on the new pod",
	"the workspace survives",
}

func (r *faultsReport) add(inv, what string) {
	if r.violations == nil {
		r.violations = map[string][]string{}
	}
	r.violations[inv] = append(r.violations[inv], what)
}

func (r *faultsReport) broken() int {
	n := 0
	for _, v := range r.violations {
		n += len(v)
	}
	return n
}

// check reads every sandbox, its pod and its hook records.
func (r *faultsReport) check(ctx context.Context, b *bench, names []string, oldUID map[string]string, created map[string][]string) {
	n := int32(len(names))
	switch st := r.final; {
	case st == nil:
		r.add(faultInvariants[0], "the ops could not be read")
	case st.Status.Phase != agentsv1alpha1.SandboxUpdateOpsCompleted:
		r.add(faultInvariants[0], fmt.Sprintf("phase %q after %s", st.Status.Phase, r.wall.Round(time.Second)))
	case st.Status.Replicas != n || st.Status.UpdatedReplicas != n || st.Status.UpdatingReplicas != 0 || st.Status.FailedReplicas != 0:
		r.add(faultInvariants[0], fmt.Sprintf("replicas %d updated %d updating %d failed %d, want %d %d 0 0",
			st.Status.Replicas, st.Status.UpdatedReplicas, st.Status.UpdatingReplicas, st.Status.FailedReplicas, n, n))
	}
	for _, d := range r.decreases {
		r.add(faultInvariants[1], d)
	}
	for name, times := range r.crashed {
		r.add(faultInvariants[2], fmt.Sprintf("%s exited on its own %d times", name, times))
	}
	var mu sync.Mutex
	add := func(inv, name, what string) {
		mu.Lock()
		defer mu.Unlock()
		r.add(inv, name+": "+what)
	}
	_ = parallel(ctx, len(names), 16, func(i int) error {
		name := names[i]
		mu.Lock()
		r.checked++
		mu.Unlock()
		r.checkSandbox(ctx, b, name, oldUID[name], created[name], func(inv int, what string) { add(faultInvariants[inv], name, what) })
		return nil
	})
	for _, v := range r.violations {
		sort.Strings(v)
	}
}

func (r *faultsReport) checkSandbox(ctx context.Context, b *bench, name, oldUID string, created []string, bad func(inv int, what string)) {
	sb, err := b.agents.AgentsV1alpha1().Sandboxes(r.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		bad(3, fmt.Sprintf("get sandbox: %v", err))
		return
	}
	switch c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading); {
	case c == nil:
		bad(3, fmt.Sprintf("no Upgrading condition (phase %s)", sb.Status.Phase))
	case c.Reason != agentsv1alpha1.UpgradingReasonSucceeded:
		bad(3, fmt.Sprintf("Upgrading %s: %s (phase %s)", c.Reason, c.Message, sb.Status.Phase))
	}
	pod, err := b.kube.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		bad(4, fmt.Sprintf("get pod: %v", err))
		return
	}
	switch {
	case string(pod.UID) == oldUID:
		bad(4, "the pod was not recreated")
		return
	case len(created) != 1:
		bad(4, fmt.Sprintf("%d pods created, want 1 (%s)", len(created), strings.Join(created, ", ")))
	case created[0] != string(pod.UID):
		bad(4, fmt.Sprintf("the pod created during the run (%s) is not the pod now (%s)", created[0], pod.UID))
	}
	if img := pod.Spec.Containers[0].Image; img != faultsImage {
		bad(4, "pod image "+img)
	}
	out, err := b.sh(ctx, r.ns, name, "cat /mnt/shared/hook-runs")
	if err != nil {
		bad(5, fmt.Sprintf("read /mnt/shared/hook-runs: %v", err))
		return
	}
	pres, posts := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[1] != name {
			bad(5, fmt.Sprintf("malformed hook record %q", line))
			continue
		}
		ts, _ := strconv.ParseFloat(f[3], 64)
		switch f[0] {
		case "pre":
			pres++
			if f[2] != "original" {
				bad(5, "ran on a new pod: "+line)
			}
			if created := float64(pod.CreationTimestamp.Unix()); ts > created+1 {
				bad(5, fmt.Sprintf("ran at %.3f, after the new pod's creation at %.0f: %s", ts, created, line))
			}
		case "post":
			posts++
			if f[2] != "NEW" {
				bad(6, "ran on the original pod: "+line)
			}
		default:
			bad(5, fmt.Sprintf("unknown hook record %q", line))
		}
	}
	if pres != 1 {
		bad(5, fmt.Sprintf("%d runs, want 1", pres))
	}
	if posts == 0 {
		bad(6, "never ran")
	}
	got, err := b.sh(ctx, r.ns, name, "cat /home/user/workspace/sub/file.txt")
	if got = strings.TrimSpace(got); err != nil || got != "data-"+name {
		bad(7, fmt.Sprintf("workspace file %q (%v), want data-%s", got, err, name))
	}
}

func (r *faultsReport) markdown() string {
	var s strings.Builder
	verdict := "every invariant held"
	if n := r.broken(); n > 0 {
		verdict = fmt.Sprintf("**%d violations**", n)
	}
	fmt.Fprintf(&s, "# molt faults at scale\n\n%s. Written by `make bench-faults` (dev/cmd/molt-bench --faults).\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&s, "%d sandboxes with a backup (preUpgrade, %ds) and a restore (postUpgrade) hook upgrade at maxUnavailable 100%% "+
		"on the local stack with its production deadlines, while molt's five services and NATS are killed with SIGKILL in turn, "+
		"one every %s, and started again %s later with the same command line", r.checked, r.cfg.hookSeconds, r.cfg.every, r.cfg.down)
	if r.cfg.wipeNATS {
		s.WriteString("; NATS's second kill also removes its store (the stream, its messages and the consumers are lost)")
	}
	fmt.Fprintf(&s, ".\n\nResult: %s. The ops ended %s after %s and %d kills.\n\n", verdict, phaseOf(r.final), r.wall.Round(time.Second), len(r.kills))
	s.WriteString("| invariant | violations |\n| --- | --- |\n")
	for _, inv := range faultInvariants {
		fmt.Fprintf(&s, "| %s | %d |\n", inv, len(r.violations[inv]))
	}
	for _, inv := range faultInvariants {
		v := r.violations[inv]
		if len(v) == 0 {
			continue
		}
		fmt.Fprintf(&s, "\n## %s: %d\n\n", inv, len(v))
		for i, line := range v {
			if i == 20 {
				fmt.Fprintf(&s, "- … %d more\n", len(v)-20)
				break
			}
			fmt.Fprintf(&s, "- %s\n", line)
		}
	}
	s.WriteString("\n## Kills\n\n| # | after the ops was created | process | |\n| --- | --- | --- | --- |\n")
	for i, k := range r.kills {
		note := ""
		if k.wiped {
			note = "store removed"
		}
		if k.err != "" {
			note = strings.TrimSpace(note + " " + k.err)
		}
		fmt.Fprintf(&s, "| %d | %s | %s | %s |\n", i+1, k.at.Round(time.Millisecond), k.victim, note)
	}
	return s.String()
}
