package main

import (
	"context"
	"fmt"
	"sort"
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
	maxUnavailable string
	n              int
	hook           bool
	wall           time.Duration
	writes         float64
	events         uint64
	stages         map[string][]time.Duration
	phase          agentsv1alpha1.SandboxUpdateOpsPhase
}

type floorResult struct {
	wall   time.Duration
	writes int
}

// upgradeRun creates N Running sandboxes in ns, applies one ops and times it.
func (b *bench) upgradeRun(ctx context.Context, ns, maxUnavailable string, n int, hook *agentsv1alpha1.UpgradeAction) (runResult, error) {
	r := runResult{maxUnavailable: maxUnavailable, n: n, hook: hook != nil}
	fmt.Printf("creating %d sandboxes in %s\n", n, ns)
	if err := b.setup(ctx, ns, n, false); err != nil {
		return r, err
	}
	if err := b.waitPhase(ctx, ns, n, agentsv1alpha1.SandboxRunning); err != nil {
		return r, err
	}
	writesBefore, err := apiserverWrites(ctx, b.kube)
	if err != nil {
		return r, err
	}
	eventsBefore, err := streamMessages(ctx, b.cfg.natsURL)
	if err != nil {
		return r, err
	}
	mu := intstr.Parse(maxUnavailable)
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"bench": ns}}
	ops.Spec.UpdateStrategy.MaxUnavailable = &mu
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v2"}]}}`)}
	if hook != nil {
		ops.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook}
	}
	start := time.Now()
	if _, err := b.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Create(ctx, ops, metav1.CreateOptions{}); err != nil {
		return r, fmt.Errorf("create ops in %s: %w", ns, err)
	}
	for {
		o, err := b.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "bench", metav1.GetOptions{})
		if err != nil {
			return r, fmt.Errorf("get ops %s/bench: %w", ns, err)
		}
		if o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsCompleted || o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsFailed {
			r.phase = o.Status.Phase
			break
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("ops %s/bench not finished: %w (status %+v)", ns, ctx.Err(), o.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.wall = time.Since(start)
	writesAfter, err := apiserverWrites(ctx, b.kube)
	if err != nil {
		return r, err
	}
	r.writes = writesAfter - writesBefore
	eventsAfter, err := streamMessages(ctx, b.cfg.natsURL)
	if err != nil {
		return r, err
	}
	r.events = eventsAfter - eventsBefore
	r.stages, err = stageLatencies(ctx, b.cfg.natsURL, ns)
	if err != nil {
		return r, err
	}
	return r, b.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}

// setup creates the namespace and N sandboxes (paused ones for the floor).
func (b *bench) setup(ctx context.Context, ns string, n int, paused bool) error {
	_, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s exists from an earlier run: delete it (kubectl delete ns %s) and run again", ns, ns)
	}
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return parallel(ctx, n, 32, func(i int) error {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sb-%04d", i), Namespace: ns, Labels: map[string]string{"bench": ns}}}
		sb.Spec.Paused = paused
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "my-registry/sandbox-image:v1"}}}}
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
	return floorResult{wall: wall, writes: 5}, b.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
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
