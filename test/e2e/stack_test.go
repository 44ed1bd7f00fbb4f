package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"molt.dev/dev/devcluster"
	"molt.dev/dev/testenv"
	versioned "molt.dev/pkg/generated/clientset/versioned"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var serviceNames = []string{"selector", "patcher", "hookrunner", "podcycler", "statusagg"}

// stageEnv is every service's environment in the tests: no leader election,
// and stage deadlines short enough that the watchdog's re-drives and
// failures happen within a test (the production defaults are minutes).
var stageEnv = []string{
	"MOLT_LEADER_ELECT=false",
	// Where deploy/ lets the services hold their Leases (when a test turns
	// leader election on).
	"MOLT_LEADER_ELECTION_NAMESPACE=" + deployNamespace,
	"MOLT_POD_READY_TIMEOUT=45s",
	"MOLT_UPGRADE_POD_GRACE=3s",
	"MOLT_STATUSAGG_PATCH_TIMEOUT=5s",
	"MOLT_STATUSAGG_HOOK_MARGIN=5s",
	"MOLT_STATUSAGG_WATCHDOG_INTERVAL=1s",
}

// stackOptions say how a stack runs the services. The zero value is the
// shared stack: one replica each, the harness's in-process NATS, stageEnv.
type stackOptions struct {
	// replicas of every service (0 means 1).
	replicas int
	// natsURL is the NATS server the services use; empty means the
	// harness's in-process server.
	natsURL string
	// env is added after stageEnv, so its variables win.
	env []string
}

// stack is the five services running as processes, each replica one
// instance: replica 1 of a service is named as the service ("selector"),
// replica 2 "selector-2", and so on.
type stack struct {
	env    *testenv.Env
	cfg    devcluster.Config
	opts   stackOptions
	agents versioned.Interface
	// kubeconfigs impersonate each service's ServiceAccount, by service.
	kubeconfigs map[string]string

	mu      sync.Mutex
	procs   map[string]*devcluster.Process // by instance
	addrs   map[string]string              // by instance
	service map[string]string              // instance -> service (its binary)
}

// Only one stack may run at a time: the services of every stack act on every
// namespace of the one control plane.
var (
	stacksMu sync.Mutex
	shared   *stack // the package's stack, once made
	running  *stack // the stack whose services run now, if any
)

// Stack returns the package's shared stack, starting its services if they
// do not run (the first time, or after a test ran a stack of its own).
func Stack(t *testing.T) *stack {
	t.Helper()
	stacksMu.Lock()
	defer stacksMu.Unlock()
	if shared == nil {
		s, err := newStack(testenv.Get(t), stackOptions{})
		if err != nil {
			t.Fatalf("make the molt services' stack: %v", err)
		}
		shared = s
	}
	if running != shared {
		switchTo(t, shared)
	}
	return shared
}

// OwnStack stops whatever stack runs and starts the services as opts say,
// for this test alone; they are stopped when the test ends, and the next
// Stack call starts the shared stack again. Service logs are in
// s.cfg.LogDir() (kept).
func OwnStack(t *testing.T, opts stackOptions) *stack {
	t.Helper()
	s, err := newStack(testenv.Get(t), opts)
	if err != nil {
		t.Fatalf("make a molt services' stack: %v", err)
	}
	stacksMu.Lock()
	defer stacksMu.Unlock()
	switchTo(t, s)
	t.Cleanup(func() {
		stacksMu.Lock()
		defer stacksMu.Unlock()
		s.stopAll()
		if running == s {
			running = nil
		}
	})
	return s
}

// switchTo stops the running stack, if any, and starts s. stacksMu is held.
func switchTo(t *testing.T, s *stack) {
	t.Helper()
	if running != nil {
		running.stopAll()
		running = nil
	}
	if err := s.startAll(); err != nil {
		s.stopAll()
		t.Fatalf("start molt services (run `make build` first): %v", err)
	}
	running = s
}

func newStack(env *testenv.Env, opts stackOptions) (*stack, error) {
	dir, err := os.MkdirTemp("", "molt-e2e-")
	if err != nil {
		return nil, err
	}
	if opts.replicas == 0 {
		opts.replicas = 1
	}
	if opts.natsURL == "" {
		opts.natsURL = env.NATSURL
	}
	s := &stack{env: env, opts: opts, cfg: devcluster.Config{BinDir: filepath.Join(env.RootDir, "bin"), StateDir: dir},
		procs: map[string]*devcluster.Process{}, addrs: map[string]string{}, service: map[string]string{}}
	for _, svc := range serviceNames {
		for i := range opts.replicas {
			s.service[s.instance(svc, i)] = svc
		}
	}
	s.agents, err = versioned.NewForConfig(env.RestConfig)
	if err != nil {
		return nil, err
	}
	// Every service runs as its ServiceAccount of deploy/, with exactly the
	// RBAC deploy/ grants it: a permission the code needs and deploy/ lacks
	// fails the tests.
	rbacOnce.Do(func() { rbacErr = applyDeployRBAC(env) })
	if rbacErr != nil {
		return nil, fmt.Errorf("apply deploy/'s RBAC for the services' ServiceAccounts: %w", rbacErr)
	}
	s.kubeconfigs = map[string]string{}
	for _, svc := range serviceNames {
		if s.kubeconfigs[svc], err = impersonatingKubeconfig(env, dir, svc); err != nil {
			return nil, err
		}
	}
	return s, nil
}

var (
	rbacOnce sync.Once
	rbacErr  error
)

// instance names replica i (from 0) of svc.
func (s *stack) instance(svc string, i int) string {
	if i == 0 {
		return svc
	}
	return fmt.Sprintf("%s-%d", svc, i+1)
}

// Replicas returns the instances of svc, replica 1 first.
func (s *stack) Replicas(svc string) []string {
	var out []string
	for i := range s.opts.replicas {
		out = append(out, s.instance(svc, i))
	}
	return out
}

// Instances returns every instance, sorted.
func (s *stack) Instances() []string {
	var out []string
	for inst := range s.service {
		out = append(out, inst)
	}
	sort.Strings(out)
	return out
}

// startAll starts every instance and waits until each is ready.
func (s *stack) startAll() error {
	insts := s.Instances()
	for _, inst := range insts {
		if err := s.start(inst); err != nil {
			return err
		}
	}
	for _, inst := range insts {
		if err := s.waitReady(inst); err != nil {
			return err
		}
	}
	return nil
}

// stopAll stops every instance (SIGTERM, SIGKILL after 15s), all at once.
func (s *stack) stopAll() {
	s.mu.Lock()
	procs := make([]*devcluster.Process, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { p.Stop(15 * time.Second) })
	}
	wg.Wait()
}

func (s *stack) start(inst string) error {
	svc, ok := s.service[inst]
	if !ok {
		return fmt.Errorf("no instance %q in this stack", inst)
	}
	port, err := devcluster.FreePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := s.cfg.Launch(inst, filepath.Join(s.cfg.BinDir, svc), append([]string{
		"--kubeconfig=" + s.kubeconfigs[svc], "--nats-url=" + s.opts.natsURL, "--http-addr=" + addr,
	}, s.env.NATSPasswords.ServiceArgs(svc)...), append(append([]string(nil), stageEnv...), s.opts.env...))
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.procs[inst], s.addrs[inst] = p, addr
	s.mu.Unlock()
	return nil
}

func (s *stack) waitReady(inst string) error {
	s.mu.Lock()
	addr, p := s.addrs[inst], s.procs[inst]
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if p.Exited() {
			return fmt.Errorf("%s exited: see %s", inst, p.LogPath)
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after 60s: see %s", inst, p.LogPath)
}

// proc returns the running process of an instance.
func (s *stack) proc(inst string) *devcluster.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[inst]
}

// Kill9 kills an instance with SIGKILL and waits until it is gone.
func (s *stack) Kill9(t *testing.T, inst string) {
	t.Helper()
	p := s.proc(inst)
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %s: %v", inst, err)
	}
	if !p.WaitExit(10 * time.Second) {
		t.Fatalf("%s still runs 10s after SIGKILL", inst)
	}
}

// Restart starts an instance that is not running again, with the same
// flags, and waits until it is ready.
func (s *stack) Restart(t *testing.T, inst string) {
	t.Helper()
	if err := s.start(inst); err != nil {
		t.Fatalf("restart %s: %v", inst, err)
	}
	if err := s.waitReady(inst); err != nil {
		t.Fatal(err)
	}
}

// Kill9AndRestart kills an instance with SIGKILL and starts it again.
func (s *stack) Kill9AndRestart(t *testing.T, inst string) {
	t.Helper()
	s.Kill9(t, inst)
	s.Restart(t, inst)
}

// Signal sends sig (SIGSTOP, SIGCONT, ...) to an instance.
func (s *stack) Signal(t *testing.T, inst string, sig syscall.Signal) {
	t.Helper()
	if err := s.proc(inst).Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("send %s to %s: %v", sig, inst, err)
	}
}

// MetricsURL is where an instance serves /metrics.
func (s *stack) MetricsURL(inst string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "http://" + s.addrs[inst] + "/metrics"
}
