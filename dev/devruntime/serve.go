package devruntime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/controller"
	"molt.dev/pkg/generated/clientset/versioned"
	agentsinformers "molt.dev/pkg/generated/informers/externalversions"
	agentslisters "molt.dev/pkg/generated/listers/agents/v1alpha1"
)

// Config is what Serve needs.
type Config struct {
	Kube   kubernetes.Interface
	Agents versioned.Interface
	// StateDir holds the pods' roots and the volumes (see ViewOf).
	StateDir string
	// Port is where each pod's runtime listens; zero means 49983.
	Port int
	// Keepalive is the keepalive period of a stream; zero means
	// DefaultKeepalive.
	Keepalive time.Duration
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Kube == nil || c.Agents == nil:
		return errors.New("devruntime: kubernetes clients are required")
	case c.StateDir == "":
		return errors.New("devruntime: a state directory is required")
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("devruntime: port %d out of range", c.Port)
	}
	return nil
}

// Serve runs an agent-runtime for every pod it serves (see Serves) until
// ctx is cancelled. A pod that is gone loses its listener and its private
// directory. Every call must carry the X-Access-Token of the pod's
// controlling Sandbox (its runtime-access-token annotation): a pod without
// one, or whose sandbox has no token, refuses every call.
func Serve(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Port == 0 {
		cfg.Port = agentruntime.Port
	}
	stateDir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return fmt.Errorf("resolve state directory %s: %w", cfg.StateDir, err)
	}
	cfg.StateDir = stateDir
	if err := os.MkdirAll(filepath.Join(stateDir, podsDir), 0o755); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	kubeFactory := kubeinformers.NewSharedInformerFactory(cfg.Kube, 0)
	agentsFactory := agentsinformers.NewSharedInformerFactory(cfg.Agents, 0)
	pods := kubeFactory.Core().V1().Pods()
	sandboxes := agentsFactory.Agents().V1alpha1().Sandboxes()
	checkpoints := agentsFactory.Agents().V1alpha1().Checkpoints()
	cp := &checkpointer{stateDir: stateDir, agents: cfg.Agents, kube: cfg.Kube, checkpoints: checkpoints.Lister(),
		sandboxes: sandboxes.Lister(), pods: pods.Lister(), restored: map[types.UID]bool{}}
	r := &runtimes{cfg: cfg, pods: pods.Lister(), sandboxes: sandboxes.Lister(), served: map[string]*served{}, checkpointer: cp}
	ctl := controller.New("devruntime", r.sync)
	if _, err := pods.Informer().AddEventHandler(ctl.Handler()); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	_ = sandboxes.Informer()
	cpCtl := controller.New("devruntime-checkpointer", cp.sync)
	if _, err := checkpoints.Informer().AddEventHandler(cpCtl.Handler()); err != nil {
		return fmt.Errorf("watch checkpoints: %w", err)
	}
	kubeFactory.Start(ctx.Done())
	agentsFactory.Start(ctx.Done())
	defer kubeFactory.Shutdown()
	defer agentsFactory.Shutdown()
	defer r.stopAll()

	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced, sandboxes.Informer().HasSynced) {
		return ctx.Err()
	}
	if err := r.removeStalePodDirs(); err != nil {
		klog.FromContext(ctx).Error(err, "Remove directories of pods that are gone")
	}
	errs := make(chan error, 1)
	go func() {
		errs <- cpCtl.Run(ctx, 2, pods.Informer().HasSynced, sandboxes.Informer().HasSynced, checkpoints.Informer().HasSynced)
	}()
	err = ctl.Run(ctx, 2, pods.Informer().HasSynced, sandboxes.Informer().HasSynced)
	return errors.Join(err, <-errs)
}

// Serves reports whether a pod gets an agent-runtime: it is Running on a
// node, with its own loopback IP (kwok's pod range).
func Serves(pod *corev1.Pod) bool {
	ip := net.ParseIP(pod.Status.PodIP)
	return pod.Spec.NodeName != "" && !pod.Spec.HostNetwork && pod.Status.Phase == corev1.PodRunning &&
		ip != nil && ip.IsLoopback()
}

// runtimes holds the listener of every pod served.
type runtimes struct {
	cfg       Config
	pods      corelisters.PodLister
	sandboxes agentslisters.SandboxLister

	// checkpointer restores a pod built from a checkpoint before it serves.
	checkpointer *checkpointer

	mu     sync.Mutex
	served map[string]*served // by pod key
}

type served struct {
	uid  types.UID
	addr string
	srv  *http.Server
	// stopped is closed when srv is: it kills the pod's processes.
	stopped chan struct{}
}

// sync makes the listener of pod key match the pod: none when the pod is
// gone or not served, one on <podIP>:<port> for its UID otherwise.
func (r *runtimes) sync(ctx context.Context, key string) error {
	logger := klog.FromContext(ctx).WithValues("pod", key)
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("split key %q: %w", key, err)
	}
	pod, err := r.pods.Pods(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		pod = nil
	case err != nil:
		return fmt.Errorf("get pod %s: %w", key, err)
	}
	addr := ""
	if pod != nil && Serves(pod) {
		addr = net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(r.cfg.Port))
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.served[key]; cur != nil {
		if pod != nil && cur.uid == pod.UID && cur.addr == addr {
			return nil
		}
		_ = cur.srv.Close()
		close(cur.stopped)
		delete(r.served, key)
		logger.Info("Stopped agent-runtime", "uid", cur.uid, "address", cur.addr)
		if pod == nil || pod.UID != cur.uid {
			r.removeLater(ctx, cur.uid)
		}
	}
	if addr == "" {
		return nil
	}
	if err := r.checkpointer.restore(ctx, pod); err != nil {
		return err
	}
	r.releaseAddr(ctx, key, addr)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for pod %s on %s: %w", key, addr, err)
	}
	stopped := make(chan struct{})
	srv := NewServer(Target{View: ViewOf(r.cfg.StateDir, pod), AccessToken: r.accessToken(pod), Stale: r.stale(pod, addr), Keepalive: r.cfg.Keepalive, Stopped: stopped})
	go func() { _ = srv.Serve(l) }()
	r.served[key] = &served{uid: pod.UID, addr: addr, srv: srv, stopped: stopped}
	logger.Info("Serving agent-runtime", "uid", pod.UID, "address", addr)
	return nil
}

// releaseAddr stops the runtime of another pod still served on addr when
// that pod no longer holds it (deleted, terminating, or on another IP now):
// kwok hands a deleted pod's IP to the next pod at once, and a call for the
// new pod must not reach the old one's runtime. r.mu is held.
func (r *runtimes) releaseAddr(ctx context.Context, key, addr string) {
	for other, s := range r.served {
		if other == key || s.addr != addr {
			continue
		}
		ns, name, _ := cache.SplitMetaNamespaceKey(other)
		pod, err := r.pods.Pods(ns).Get(name)
		if err == nil && pod.UID == s.uid && pod.DeletionTimestamp == nil && Serves(pod) &&
			net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(r.cfg.Port)) == addr {
			continue // it still holds the address: the new pod waits
		}
		_ = s.srv.Close()
		close(s.stopped)
		delete(r.served, other)
		klog.FromContext(ctx).Info("Stopped agent-runtime of a pod whose address went to another", "pod", other, "uid", s.uid, "address", addr, "for", key)
		if err != nil || pod.UID != s.uid {
			r.removeLater(ctx, s.uid)
		}
	}
}

// removeLater removes the directory of the pod with uid, which is gone, in
// the background: not under r.mu, which every sync takes. Behind a burst of
// replacements, with hooks writing archives, one unlink can wait on the disk
// for seconds, and every pod's listener would wait behind it (seen: new pods
// served 24 s after kwok made them Ready). A uid never comes back.
func (r *runtimes) removeLater(ctx context.Context, uid types.UID) {
	logger := klog.FromContext(ctx)
	go func() {
		if err := removePodDir(podDir(r.cfg.StateDir, string(uid))); err != nil {
			logger.Error(err, "Remove directory of a pod that is gone", "uid", uid)
		}
	}()
}

// accessToken returns the token of pod's controlling Sandbox, read on every
// request: "" (every request refused) when the pod has no sandbox, the
// sandbox is gone or it has no token annotation. The cache is read first;
// when it shows no token (podcycler writes it just before the sandbox's
// first pod, and the cache may not have caught up) the API server is asked.
func (r *runtimes) accessToken(pod *corev1.Pod) func() string {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "Sandbox" || ref.APIVersion != agentsv1alpha1.SchemeGroupVersion.String() {
		return func() string { return "" }
	}
	ns, name, uid := pod.Namespace, ref.Name, ref.UID
	return func() string {
		sb, err := r.sandboxes.Sandboxes(ns).Get(name)
		if err == nil && sb.UID == uid {
			if token := agentruntime.AccessToken(sb.Annotations); token != "" {
				return token
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		sb, err = r.cfg.Agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || sb.UID != uid {
			return ""
		}
		return agentruntime.AccessToken(sb.Annotations)
	}
}

// stale says whether pod no longer holds addr: it is gone, replaced,
// terminating or on another address, by the cache or else by the API
// server. kwok hands a deleted pod's IP to the next pod at once (the next
// pod may be the same sandbox's, with the same token), and this process may
// not have seen either change yet: its informers lag behind a burst of pod
// replacements by seconds. Asked on every request; an error of the question
// says not stale.
func (r *runtimes) stale(pod *corev1.Pod, addr string) func() bool {
	ns, name, uid := pod.Namespace, pod.Name, pod.UID
	gone := func(cur *corev1.Pod) bool {
		return cur.UID != uid || cur.DeletionTimestamp != nil || !Serves(cur) ||
			net.JoinHostPort(cur.Status.PodIP, strconv.Itoa(r.cfg.Port)) != addr
	}
	return func() bool {
		// The cache first: it may already know.
		if cur, err := r.pods.Pods(ns).Get(name); apierrors.IsNotFound(err) || (err == nil && gone(cur)) {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cur, err := r.cfg.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true
		case err != nil:
			return false
		}
		return gone(cur)
	}
}

func (r *runtimes) stopAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, s := range r.served {
		_ = s.srv.Close()
		close(s.stopped)
		delete(r.served, key)
	}
}

// removeStalePodDirs removes the directories of pods that no longer exist
// (deleted while no runtime ran).
func (r *runtimes) removeStalePodDirs() error {
	all, err := r.pods.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	live := map[string]bool{}
	for _, p := range all {
		live[string(p.UID)] = true
	}
	entries, err := os.ReadDir(filepath.Join(r.cfg.StateDir, podsDir))
	if err != nil {
		return fmt.Errorf("read pod directories: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !live[e.Name()] {
			errs = append(errs, removePodDir(podDir(r.cfg.StateDir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// removePodDir removes dir unless something is mounted under it in this
// mount namespace (which would make RemoveAll reach into the host's files).
func removePodDir(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			return fmt.Errorf("remove %s: %s is mounted under it", dir, fields[4])
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read mounts: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
