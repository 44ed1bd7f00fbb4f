package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"molt.dev/pkg/devcluster"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var serviceNames = []string{"selector", "patcher", "hookrunner", "podcycler", "statusagg"}

// stageEnv is every service's environment in the tests: no leader election,
// and stage deadlines short enough that the watchdog's re-drives and
// failures happen within a test (the production defaults are minutes).
var stageEnv = []string{
	"MOLT_LEADER_ELECT=false",
	"MOLT_POD_READY_TIMEOUT=45s",
	"MOLT_PATCH_TIMEOUT=5s",
	"MOLT_HOOK_MARGIN=5s",
	"MOLT_WATCHDOG_INTERVAL=1s",
}

// stack is the five services running as processes.
type stack struct {
	env    *testenv.Env
	cfg    devcluster.Config
	mu     sync.Mutex
	procs  map[string]*devcluster.Process
	addrs  map[string]string
	agents versioned.Interface
}

var (
	stackOnce sync.Once
	shared    *stack
	stackErr  error
)

// Stack starts the services once per package and returns them.
func Stack(t *testing.T) *stack {
	t.Helper()
	env := testenv.Get(t)
	stackOnce.Do(func() {
		dir, err := os.MkdirTemp("", "molt-e2e-")
		if err != nil {
			stackErr = err
			return
		}
		s := &stack{env: env, cfg: devcluster.Config{BinDir: filepath.Join(env.RootDir, "bin"), StateDir: dir},
			procs: map[string]*devcluster.Process{}, addrs: map[string]string{}}
		s.agents, err = versioned.NewForConfig(env.RestConfig)
		if err != nil {
			stackErr = err
			return
		}
		for _, name := range serviceNames {
			if err := s.start(name); err != nil {
				stackErr = err
				return
			}
		}
		for _, name := range serviceNames {
			if err := s.waitReady(name); err != nil {
				stackErr = err
				return
			}
		}
		shared = s
	})
	if stackErr != nil {
		t.Fatalf("start molt services (run `make build` first): %v", stackErr)
	}
	return shared
}

func (s *stack) start(name string) error {
	port, err := devcluster.FreePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := s.cfg.Launch(name, filepath.Join(s.cfg.BinDir, name), []string{
		"--kubeconfig=" + s.env.Kubeconfig, "--nats-url=" + s.env.NATSURL, "--http-addr=" + addr,
	}, stageEnv)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.procs[name], s.addrs[name] = p, addr
	s.mu.Unlock()
	return nil
}

func (s *stack) waitReady(name string) error {
	s.mu.Lock()
	addr, p := s.addrs[name], s.procs[name]
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if p.Exited() {
			return fmt.Errorf("%s exited: see %s", name, p.LogPath)
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
	return fmt.Errorf("%s not ready after 60s: see %s", name, p.LogPath)
}

// Kill9 kills a service with SIGKILL and starts it again.
func (s *stack) Kill9AndRestart(t *testing.T, name string) {
	t.Helper()
	s.mu.Lock()
	p := s.procs[name]
	s.mu.Unlock()
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %s: %v", name, err)
	}
	if !p.WaitExit(10 * time.Second) {
		t.Fatalf("%s still runs 10s after SIGKILL", name)
	}
	if err := s.start(name); err != nil {
		t.Fatalf("restart %s: %v", name, err)
	}
	if err := s.waitReady(name); err != nil {
		t.Fatal(err)
	}
}

// MetricsURL is where a service serves /metrics.
func (s *stack) MetricsURL(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "http://" + s.addrs[name] + "/metrics"
}

var _ = context.Background
