package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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
		wipeAt = len(faultVictims) + slices.Index(faultVictims, "nats-server")
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
