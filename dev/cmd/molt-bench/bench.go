package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
)

type bench struct {
	cfg        config
	kube       kubernetes.Interface
	agents     versioned.Interface
	restConfig *rest.Config
}

type runResult struct {
	shape shape
	n     int
	wall  time.Duration
	// phase is Completed if every ops completed, else the first other phase.
	phase agentsv1alpha1.SandboxUpdateOpsPhase
	// writes are the API server's write requests during the run, the bench's
	// own ops creates taken out.
	writes map[requestKey]float64
	// setupWrites are the API writes from the first namespace's create to
	// every sandbox Running, before the ops: creating sandboxes costs molt
	// writes too (podcycler's pods and tokens, statusagg's first statuses).
	setupWrites map[requestKey]float64
	// cpu is the CPU time every process of the stack spent during the run.
	cpu    map[string]time.Duration
	events uint64
	stages map[string][]time.Duration
	// completedLag is the longest, over the run's ops, from the last
	// sandbox of its namespace finishing to the bench seeing it Completed.
	completedLag time.Duration
	// replicaRSS is the peak RSS in kB of the extra replicas, read before
	// they are stopped.
	replicaRSS map[string]int64
}

type floorResult struct {
	n      int
	wall   time.Duration
	writes int
}

// upgradeRun creates the shape's Running sandboxes, one namespace at a time,
// then creates one ops per namespace at once and times them to Completed.
// CPU, API writes and stream messages are read just before the ops are
// created and just after the last one finished.
func (b *bench) upgradeRun(ctx context.Context, runID string, s shape) (runResult, error) {
	r := runResult{shape: s, n: s.sandboxes()}
	// Earlier runs' namespaces that still terminate would add their deletes
	// to this run's writes and CPU: setup starts once they are gone.
	if err := b.waitNamespacesGone(ctx, nil); err != nil {
		return r, err
	}
	setupBefore, err := apiserverWrites(ctx, b.kube)
	if err != nil {
		return r, err
	}
	var namespaces []string
	for i := range s.namespaces {
		ns := fmt.Sprintf("bench-%s-%s-%d", runID, s.key, i)
		fmt.Printf("creating %d sandboxes in %s\n", s.perNamespace, ns)
		if err := b.setup(ctx, ns, s.perNamespace, false); err != nil {
			return r, err
		}
		namespaces = append(namespaces, ns)
	}
	for _, ns := range namespaces {
		if err := b.waitPhase(ctx, ns, s.perNamespace, agentsv1alpha1.SandboxRunning); err != nil {
			return r, err
		}
	}
	setupAfter, err := apiserverWrites(ctx, b.kube)
	if err != nil {
		return r, err
	}
	r.setupWrites = deltaWrites(setupBefore, setupAfter)
	// The bench's own writes: the namespaces and the sandboxes.
	r.setupWrites[requestKey{verb: "POST", resource: "namespaces", code: "201"}] -= float64(len(namespaces))
	r.setupWrites[requestKey{verb: "POST", group: agentsGroup, resource: "sandboxes", code: "201"}] -= float64(r.n)
	procs, err := stackProcesses(b.cfg.pidDir)
	if err != nil {
		return r, err
	}
	var reps *replicas
	if s.replicas > 1 {
		reps, err = startReplicas(ctx, b.cfg, s.replicas)
		defer reps.stop()
		if err != nil {
			return r, err
		}
		procs = append(procs, reps.processes()...)
	}
	writesBefore, err := apiserverWrites(ctx, b.kube)
	if err != nil {
		return r, err
	}
	deletesBefore, err := podcyclerDeletes(ctx, podcyclerAddrs)
	if err != nil {
		return r, err
	}
	cpuBefore := cpuTimes(procs)
	eventsBefore, err := streamMessages(ctx, b.cfg.natsURL)
	if err != nil {
		return r, err
	}
	// The ops of this shape's run carry this label; earlier shapes' may
	// still be there while their namespaces terminate.
	run := runID + "-" + s.key
	start := time.Now()
	for _, ns := range namespaces {
		if _, err := b.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Create(ctx, b.ops(ns, run, s), metav1.CreateOptions{}); err != nil {
			return r, fmt.Errorf("create ops in %s: %w", ns, err)
		}
	}
	seen, err := b.waitOps(ctx, run, len(namespaces))
	if err != nil {
		return r, err
	}
	r.phase = agentsv1alpha1.SandboxUpdateOpsCompleted
	for _, o := range seen {
		if o.at.Sub(start) > r.wall {
			r.wall = o.at.Sub(start)
		}
		if o.phase != agentsv1alpha1.SandboxUpdateOpsCompleted && r.phase == agentsv1alpha1.SandboxUpdateOpsCompleted {
			r.phase = o.phase
		}
	}
	cpuAfter := cpuTimes(procs)
	if reps != nil {
		r.replicaRSS = reps.peakRSS()
	}
	writesAfter, err := apiserverWrites(ctx, b.kube)
	if err != nil {
		return r, err
	}
	deletesAfter, err := podcyclerDeletes(ctx, podcyclerAddrs)
	if err != nil {
		return r, err
	}
	r.writes = deltaWrites(writesBefore, writesAfter)
	attributeKubeletDeletes(r.writes, deletesAfter-deletesBefore)
	// The bench's own writes: one ops create per namespace.
	r.writes[requestKey{verb: "POST", group: agentsGroup, resource: "sandboxupdateops", code: "201"}] -= float64(len(namespaces))
	r.cpu = deltaCPU(cpuBefore, cpuAfter)
	eventsAfter, err := streamMessages(ctx, b.cfg.natsURL)
	if err != nil {
		return r, err
	}
	r.events = eventsAfter - eventsBefore
	r.stages = map[string][]time.Duration{}
	for _, ns := range namespaces {
		h, err := readHistory(ctx, b.cfg.natsURL, ns)
		if err != nil {
			return r, err
		}
		for name, d := range h.stages {
			r.stages[name] = append(r.stages[name], d...)
		}
		if lag := seen[ns].at.Sub(h.last); !h.last.IsZero() && lag > r.completedLag {
			r.completedLag = lag
		}
	}
	for _, ns := range namespaces {
		if err := b.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			return r, fmt.Errorf("delete namespace %s: %w", ns, err)
		}
	}
	return r, nil
}

// waitNamespacesGone waits until no namespace of the bench ("bench-…")
// exists but keep. One that is not being deleted was left by an interrupted
// run (the bench deletes its namespaces after each run): it is deleted here.
func (b *bench) waitNamespacesGone(ctx context.Context, keep []string) error {
	for said := false; ; said = true {
		list, err := b.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list namespaces: %w", err)
		}
		var left []string
		for _, ns := range list.Items {
			if !strings.HasPrefix(ns.Name, "bench-") || slices.Contains(keep, ns.Name) {
				continue
			}
			if ns.DeletionTimestamp == nil {
				fmt.Printf("deleting namespace %s, left by an interrupted run\n", ns.Name)
				if err := b.kube.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("delete namespace %s of an interrupted run: %w", ns.Name, err)
				}
			}
			left = append(left, ns.Name)
		}
		if len(left) == 0 {
			return nil
		}
		if !said {
			fmt.Printf("waiting for %d namespaces of earlier runs to be deleted (%s)\n", len(left), strings.Join(left, ", "))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespaces %s still there: %w", strings.Join(left, ", "), ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// ops is the shape's SandboxUpdateOps for ns: an image-only patch, the
// shape's maxUnavailable (an integer if it has no %) and hook.
func (b *bench) ops(ns, run string, s shape) *agentsv1alpha1.SandboxUpdateOps {
	mu := intstr.Parse(s.maxUnavailable)
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns, Labels: map[string]string{"bench-run": run}}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"bench": ns}}
	ops.Spec.UpdateStrategy.MaxUnavailable = &mu
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v2"}]}}`)}
	if s.hookSeconds > 0 {
		ops.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{
			Exec:           &agentsv1alpha1.ExecAction{Command: []string{"/bin/bash", "-c", fmt.Sprintf("sleep %d", s.hookSeconds)}},
			TimeoutSeconds: int32(s.hookSeconds + 60),
		}}
	}
	return ops
}

// opsSeen is when the bench first saw an ops Completed or Failed.
type opsSeen struct {
	at    time.Time
	phase agentsv1alpha1.SandboxUpdateOpsPhase
}

// waitOps watches the run's ops until want of them have finished, and
// returns when it saw each finish, by namespace. It lists once and then
// watches from there (again after a watch ends), so the bench's own reads
// cost the API server little while it measures.
func (b *bench) waitOps(ctx context.Context, run string, want int) (map[string]opsSeen, error) {
	seen := map[string]opsSeen{}
	note := func(o *agentsv1alpha1.SandboxUpdateOps) {
		done := o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsCompleted || o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsFailed
		if _, ok := seen[o.Namespace]; done && !ok {
			seen[o.Namespace] = opsSeen{at: time.Now(), phase: o.Status.Phase}
		}
	}
	opts := metav1.ListOptions{LabelSelector: "bench-run=" + run}
	for {
		list, err := b.agents.AgentsV1alpha1().SandboxUpdateOps("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list ops of run %s: %w", run, err)
		}
		for i := range list.Items {
			note(&list.Items[i])
		}
		if len(seen) >= want {
			return seen, nil
		}
		w, err := b.agents.AgentsV1alpha1().SandboxUpdateOps("").Watch(ctx, metav1.ListOptions{LabelSelector: opts.LabelSelector, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return nil, fmt.Errorf("watch ops of run %s: %w", run, err)
		}
		for ev := range w.ResultChan() {
			if o, ok := ev.Object.(*agentsv1alpha1.SandboxUpdateOps); ok {
				note(o)
			}
			if len(seen) >= want {
				w.Stop()
				return seen, nil
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%d of %d ops of run %s finished: %w", len(seen), want, run, err)
		}
	}
}

// setup creates the namespace and N sandboxes (paused ones for the floor).
func (b *bench) setup(ctx context.Context, ns string, n int, paused bool) error {
	return b.setupWith(ctx, ns, n, func(sb *agentsv1alpha1.Sandbox) { sb.Spec.Paused = paused })
}

// sandboxName is the name of a run's i-th sandbox.
func sandboxName(i int) string { return fmt.Sprintf("sb-%04d", i) }

// setupWith creates the namespace and N sandboxes, each changed by mutate
// before it is created.
func (b *bench) setupWith(ctx context.Context, ns string, n int, mutate func(*agentsv1alpha1.Sandbox)) error {
	_, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s exists from an earlier run: delete it (kubectl delete ns %s) and run again", ns, ns)
	}
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return parallel(ctx, n, 32, func(i int) error {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: sandboxName(i), Namespace: ns, Labels: map[string]string{"bench": ns}}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "my-registry/sandbox-image:v1"}}}}
		mutate(sb)
		_, err := b.agents.AgentsV1alpha1().Sandboxes(ns).Create(ctx, sb, metav1.CreateOptions{})
		return err
	})
}

func (b *bench) waitPhase(ctx context.Context, ns string, want int, phase agentsv1alpha1.SandboxPhase) error {
	for {
		list, err := b.agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return fmt.Errorf("list sandboxes in %s: %w", ns, err)
		}
		n := 0
		for _, sb := range list.Items {
			if sb.Status.Phase == phase {
				n++
			}
		}
		if n >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d sandboxes in %s reached %s: %w", n, want, ns, phase, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// floorRun issues, per sandbox, the minimal writes one upgrade needs (patch
// the sandbox spec, delete the old pod, create the new pod, two status
// writes) directly, at full concurrency, and times them. The sandboxes are
// paused so molt's services leave their pods alone.
func (b *bench) floorRun(ctx context.Context, ns string) (floorResult, error) {
	if err := b.setup(ctx, ns, b.cfg.n, true); err != nil {
		return floorResult{}, err
	}
	// Let statusagg settle the paused sandboxes first, so the timed writes
	// compete only with each other.
	if err := b.waitPhase(ctx, ns, b.cfg.n, agentsv1alpha1.SandboxPaused); err != nil {
		return floorResult{}, err
	}
	if err := parallel(ctx, b.cfg.n, 32, func(i int) error {
		pod := floorPod(ns, fmt.Sprintf("sb-%04d-old", i))
		_, err := b.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	}); err != nil {
		return floorResult{}, fmt.Errorf("floor setup pods: %w", err)
	}
	// The last run's namespace may still be deleted: its deletes would share
	// the API server with the timed writes.
	if err := b.waitNamespacesGone(ctx, []string{ns}); err != nil {
		return floorResult{}, err
	}
	start := time.Now()
	err := parallel(ctx, b.cfg.n, 128, func(i int) error {
		name := fmt.Sprintf("sb-%04d", i)
		sbs := b.agents.AgentsV1alpha1().Sandboxes(ns)
		patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v2"}]}}}}`)
		sb, err := sbs.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return err
		}
		if err := b.kube.CoreV1().Pods(ns).Delete(ctx, name+"-old", metav1.DeleteOptions{}); err != nil {
			return err
		}
		if _, err := b.kube.CoreV1().Pods(ns).Create(ctx, floorPod(ns, name+"-new"), metav1.CreateOptions{}); err != nil {
			return err
		}
		for _, msg := range []string{"upgrading", "done"} {
			status := []byte(`{"status":{"message":"floor ` + msg + `"}}`)
			if _, err := sbs.Patch(ctx, sb.Name, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
				return err
			}
		}
		return nil
	})
	wall := time.Since(start)
	if err != nil {
		return floorResult{}, fmt.Errorf("floor writes: %w", err)
	}
	return floorResult{n: b.cfg.n, wall: wall, writes: 5}, b.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}

func floorPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "my-registry/sandbox-image:v1"}}},
	}
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	idx := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		idx <- i
	}
	close(idx)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}
