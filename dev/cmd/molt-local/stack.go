package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"molt.dev/dev/devcluster"
	"molt.dev/pkg/service"
)

// stackConfig is the fixed shape of the local stack; ports can be moved with
// environment variables if they clash with something on the machine.
type stackConfig struct {
	root     string
	binDir   string
	stateDir string
	natsPort int
	cluster  devcluster.Config
}

// services are molt's five services with their default health addresses
// and the flags the local stack gives them beyond the common ones.
var services = []serviceSpec{
	{"selector", "127.0.0.1:9101", nil},
	{"patcher", "127.0.0.1:9102", nil},
	// kwok marks a new pod Ready at once, and the development runtime
	// starts serving it when it sees the pod Running: behind a burst of
	// hundreds of replacements that is seconds later (up to 7 s seen with
	// 300 at once; a real pod's agent-runtime runs when the pod is Ready).
	// The restore waits for it rather than failing the sandbox, with room
	// to spare on a slower machine; 15s is the default.
	{"hookrunner", "127.0.0.1:9103", []string{"--runtime-reach-wait=60s"}},
	{"podcycler", "127.0.0.1:9104", nil},
	{"statusagg", "127.0.0.1:9105", nil},
}

// serviceSpec is one of molt's services in the local stack.
type serviceSpec struct {
	name, addr string
	flags      []string
}

// stopOrder stops dependents before what they depend on.
var stopOrder = []string{"selector", "patcher", "hookrunner", "podcycler", "statusagg", "molt-devruntime", "molt-devnode", "nats-server", "kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"}

func loadConfig() (stackConfig, error) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return stackConfig{}, err
	}
	state := envOr("MOLT_STATE_DIR", filepath.Join(root, ".molt"))
	c := stackConfig{root: root, binDir: filepath.Join(root, "bin"), stateDir: state}
	ports := map[string]*int{"MOLT_NATS_PORT": &c.natsPort, "MOLT_ETCD_PORT": &c.cluster.EtcdPort, "MOLT_ETCD_PEER_PORT": &c.cluster.EtcdPeerPort, "MOLT_APISERVER_PORT": &c.cluster.APIServerPort}
	defaults := map[string]int{"MOLT_NATS_PORT": 4222, "MOLT_ETCD_PORT": 23790, "MOLT_ETCD_PEER_PORT": 23800, "MOLT_APISERVER_PORT": 16443}
	for key, p := range ports {
		*p = defaults[key]
		if v := os.Getenv(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || n > 65535 {
				return stackConfig{}, fmt.Errorf("env %s=%q: not a port number", key, v)
			}
			*p = n
		}
	}
	c.cluster.BinDir = c.binDir
	c.cluster.StateDir = state
	c.cluster.Nodes = 3
	c.cluster.KwokConfig = filepath.Join(root, "deploy", "kwok", "stages.yaml")
	c.cluster.CRDDir = filepath.Join(root, "deploy", "crds")
	for _, f := range devcluster.AdmissionPolicyFiles {
		c.cluster.AdmissionPolicies = append(c.cluster.AdmissionPolicies, filepath.Join(root, f))
	}
	c.cluster.Detach = true
	c.cluster.Logf = func(format string, args ...any) { fmt.Printf("  "+format+"\n", args...) }
	return c, nil
}

func (c stackConfig) natsURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", c.natsPort) }

// natsAuthDir holds the local stack's NATS passwords, one file per user of
// deploy/nats/auth.conf (made by the first `make up`, kept after).
func (c stackConfig) natsAuthDir() string { return filepath.Join(c.stateDir, "nats-auth") }

// controlPlane are the processes a restart of the rest can keep: when any of
// them stopped, `make up` starts the whole stack again.
var controlPlane = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// startOrder is the order up starts the processes after the control plane.
var startOrder = []string{"nats-server", "molt-devnode", "molt-devruntime", "selector", "patcher", "hookrunner", "podcycler", "statusagg"}

func up(c stackConfig) error {
	pids, err := devcluster.ReadPidFiles(c.cluster.PidDir())
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		alive := map[string]bool{}
		for _, p := range pids {
			alive[p.Name] = p.Alive() && !stopping(p)
		}
		var stopped []string
		for _, name := range startOrder {
			if !alive[name] {
				stopped = append(stopped, name)
			}
		}
		switch {
		case !slices.ContainsFunc(controlPlane, func(n string) bool { return !alive[n] }) && len(stopped) == 0:
			fmt.Println("molt local stack is already running.")
			printNext(c)
			return nil
		case !slices.ContainsFunc(controlPlane, func(n string) bool { return !alive[n] }):
			// One service (or NATS) died: start only what stopped, so the
			// rest (the sandboxes' pods and their hooks included) runs on.
			fmt.Printf("the control plane runs; starting what stopped: %s\n", strings.Join(stopped, ", "))
			return c.start(stopped)
		}
		fmt.Println("a previous stack is partly running (its control plane stopped); stopping it first")
		if err := down(c); err != nil {
			return err
		}
	}
	cidr, err := nextPodCIDR(c.stateDir)
	if err != nil {
		return err
	}
	c.cluster.PodCIDR = cidr
	fmt.Println("starting the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := devcluster.Start(ctx, c.cluster); err != nil {
		_ = down(c)
		return err
	}
	if err := c.start(startOrder); err != nil {
		_ = down(c)
		return err
	}
	return nil
}

// start launches names (of startOrder, in its order) beside a running control
// plane, waits until the molt services among them are ready, and prints the
// next steps.
func (c stackConfig) start(names []string) error {
	// NATS runs with deploy/nats/auth.conf, as in a cluster: each service
	// logs in as its own user, allowed only its own subjects.
	passwords, err := devcluster.LoadNATSPasswords(c.natsAuthDir())
	if err != nil {
		return err
	}
	kubeconfig := c.cluster.KubeconfigPath()
	for _, name := range names {
		var args, env []string
		switch name {
		case "nats-server":
			fmt.Printf("starting NATS with JetStream on %s (store %s, users of deploy/nats/auth.conf, passwords in %s)\n",
				c.natsURL(), filepath.Join(c.stateDir, "nats"), c.natsAuthDir())
			args = []string{"-c", devcluster.NATSAuthConf(c.root),
				"-a", "127.0.0.1", "-p", strconv.Itoa(c.natsPort), "-js", "-sd", filepath.Join(c.stateDir, "nats"), "-n", "molt-local"}
			env = passwords.ServerEnv()
		case "molt-devnode":
			args = []string{"--kubeconfig=" + kubeconfig}
		case "molt-devruntime":
			// The development agent-runtime answers the envd process protocol on
			// each pod's IP (127.100.x.y:49983) with a per-pod filesystem view.
			args = []string{"serve", "--kubeconfig=" + kubeconfig, "--state-dir=" + filepath.Join(c.stateDir, "devruntime")}
		default:
			i := slices.IndexFunc(services, func(s serviceSpec) bool { return s.name == name })
			if i < 0 {
				return fmt.Errorf("no process %q in the local stack", name)
			}
			s := services[i]
			fmt.Println("starting " + s.name)
			args = append([]string{"--kubeconfig=" + kubeconfig, "--nats-url=" + c.natsURL(), "--http-addr=" + s.addr},
				append(passwords.ServiceArgs(s.name), s.flags...)...)
		}
		if _, err := c.cluster.Launch(name, filepath.Join(c.binDir, name), args, env); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, s := range services {
		if !slices.Contains(names, s.name) {
			continue
		}
		if err := waitReady(ctx, s.name, "http://"+s.addr+"/readyz", filepath.Join(c.cluster.LogDir(), s.name+".log")); err != nil {
			return err
		}
		fmt.Printf("  %s ready (http://%s/metrics)\n", s.name, s.addr)
	}
	printNext(c)
	return nil
}

func printNext(c stackConfig) {
	fmt.Printf(`
molt is up. Next:
  export KUBECONFIG=%s
  export PATH=%s:$PATH
  kubectl get nodes
  kubectl get suo,sbx,sbs,cp -A
  # the event history, as the read-only NATS user viewer:
  export NATS_URL=%s NATS_USER=viewer NATS_PASSWORD="$(cat %s)"
  nats stream info MOLT_EVENTS
  make status    # what runs; logs are in %s
  make down      # stop it all
`, c.cluster.KubeconfigPath(), c.binDir, c.natsURL(), filepath.Join(c.natsAuthDir(), "viewer.password"), c.cluster.LogDir())
}

func down(c stackConfig) error {
	pids, err := devcluster.ReadPidFiles(c.cluster.PidDir())
	if err != nil {
		return err
	}
	slices.SortStableFunc(pids, func(a, b devcluster.PidFile) int {
		return rank(a.Name) - rank(b.Name)
	})
	var errs []error
	for _, p := range pids {
		alive := p.Alive()
		if err := p.StopPid(5 * time.Second); err != nil {
			errs = append(errs, err)
			continue
		}
		if alive {
			fmt.Printf("stopped %s (pid %d)\n", p.Name, p.Pid)
		}
	}
	if len(pids) == 0 {
		fmt.Println("nothing to stop")
	}
	return errors.Join(errs...)
}

func status(c stackConfig) error {
	pids, err := devcluster.ReadPidFiles(c.cluster.PidDir())
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		fmt.Println("molt local stack is not running (start it with `make up`)")
		return nil
	}
	slices.SortStableFunc(pids, func(a, b devcluster.PidFile) int { return rank(b.Name) - rank(a.Name) })
	for _, p := range pids {
		state := "running"
		if !p.Alive() {
			state = "NOT RUNNING (see " + filepath.Join(c.cluster.LogDir(), p.Name+".log") + ")"
		}
		fmt.Printf("%-24s pid %-8d %s\n", p.Name, p.Pid, state)
	}
	fmt.Printf("\nKUBECONFIG=%s  NATS=%s\n", c.cluster.KubeconfigPath(), c.natsURL())
	return nil
}

func rank(name string) int {
	if i := slices.Index(stopOrder, name); i >= 0 {
		return i
	}
	return -1
}

func waitReady(ctx context.Context, name, url, log string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready at %s after 60s: %s (see %s)", name, url, last, log)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// nextPodCIDR is the pod range kwok hands out IPs from in this start of the
// stack: the next /20 of 127.100.0.0/16 after the last start's (kept in the
// state directory). kwok does not learn, when it starts, the IPs of pods that
// already run, so on the same range it would give a new pod the IP of a
// running one, and a hook meant for the new pod would reach the old pod's
// agent-runtime. Pods older than 16 starts would collide again.
func nextPodCIDR(stateDir string) (string, error) {
	path := filepath.Join(stateDir, "kwok-pod-cidr-generation")
	gen := 0
	if b, err := os.ReadFile(path); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			gen = (n + 1) % 16
		}
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return "", fmt.Errorf("create state dir %s: %w", stateDir, err)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(gen)+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("record the pod range: %w", err)
	}
	return fmt.Sprintf("127.100.%d.0/20", gen*16), nil
}

// stoppingWait bounds how long up waits for a service that runs but is
// shutting down: one shutting down after a SIGTERM takes up to its
// --shutdown-timeout to exit.
const stoppingWait = 15 * time.Second

// stopping reports whether p, a molt service whose process runs, is on its
// way out: its /readyz says it is shutting down (or does not answer), and it
// exits within stoppingWait.
// Counted as running, it would be left out of the restart, and stay down
// once it exits. A service that answers (or does not exit) is running.
func stopping(p devcluster.PidFile) bool {
	i := slices.IndexFunc(services, func(s serviceSpec) bool { return s.name == p.Name })
	if i < 0 {
		return false
	}
	client := http.Client{Timeout: time.Second}
	// Its /readyz says "shutting down" from the SIGTERM on (service.ErrShuttingDown);
	// the HTTP server itself goes last, just before it exits.
	shuttingDown := func() bool {
		resp, err := client.Get("http://" + services[i].addr + "/readyz")
		if err != nil {
			return true
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return strings.Contains(string(body), service.ErrShuttingDown.Error())
	}
	for deadline := time.Now().Add(stoppingWait); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if !p.Alive() {
			fmt.Printf("%s was stopping; it is started again\n", p.Name)
			return true
		}
		if !shuttingDown() {
			return false
		}
	}
	return false
}
