package devcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config says where the binaries are, where state goes and how the cluster
// is shaped. Zero ports are replaced by free ones.
type Config struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and kwok.
	BinDir string
	// StateDir holds etcd's data, keys, logs, pid files and the kubeconfig.
	StateDir string
	// EtcdPort, EtcdPeerPort and APIServerPort are the listen ports.
	EtcdPort, EtcdPeerPort, APIServerPort int
	// Nodes is how many kwok nodes to create (default 3).
	Nodes int
	// KwokConfig is kwok's stage configuration (deploy/kwok/stages.yaml).
	KwokConfig string
	// PodCIDR is where kwok hands out pod IPs; a loopback range lets the
	// development agent-runtime listen on each pod's IP.
	PodCIDR string
	// CRDDir, when set, holds CRD manifests to install and wait for.
	CRDDir string
	// AdmissionPolicies are files of ValidatingAdmissionPolicies and
	// bindings to install after the CRDs (AdmissionPolicyFiles).
	AdmissionPolicies []string
	// Detach starts the processes in their own sessions with pid files, so
	// they outlive the caller (make up).
	Detach bool
	// Logf reports progress; nil means quiet.
	Logf func(format string, args ...any)
}

// Cluster is a started control plane.
type Cluster struct {
	cfg        Config
	Kubeconfig string
	RestConfig *rest.Config
	Processes  []*Process
}

// Dirs below StateDir.
func (c Config) logDir() string { return filepath.Join(c.StateDir, "logs") }
func (c Config) pidDir() string { return filepath.Join(c.StateDir, "pids") }
func (c Config) pkiDir() string { return filepath.Join(c.StateDir, "pki") }

// KubeconfigPath is where Start writes the admin kubeconfig.
func (c Config) KubeconfigPath() string { return filepath.Join(c.StateDir, "kubeconfig") }

func (c *Config) defaults() error {
	if c.BinDir == "" || c.StateDir == "" {
		return errors.New("devcluster: BinDir and StateDir must be set")
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.PodCIDR == "" {
		c.PodCIDR = "127.100.0.1/16"
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	for _, p := range []*int{&c.EtcdPort, &c.EtcdPeerPort, &c.APIServerPort} {
		if *p == 0 {
			port, err := FreePort()
			if err != nil {
				return err
			}
			*p = port
		}
	}
	return nil
}

// Start brings the control plane up and returns when the API server is
// ready, the CRDs are established and every kwok node is Ready. On failure
// it stops what it started and names the log to read.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	for _, d := range []string{cfg.StateDir, cfg.pkiDir(), cfg.logDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	c := &Cluster{cfg: cfg, Kubeconfig: cfg.KubeconfigPath()}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()

	saKey, saPub, err := writeServiceAccountKeys(cfg.pkiDir())
	if err != nil {
		return nil, err
	}
	tokenFile, token, err := writeTokenFile(cfg.pkiDir())
	if err != nil {
		return nil, err
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(cfg.EtcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(cfg.EtcdPeerPort)
	if err := c.start("etcd", []string{
		"--name=molt", "--data-dir=" + filepath.Join(cfg.StateDir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=molt=" + peerURL,
		"--unsafe-no-fsync=true", "--quota-backend-bytes=4294967296",
		"--listen-metrics-urls=", "--log-level=warn",
	}); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, c, "etcd", etcdURL+"/health", "", 60*time.Second); err != nil {
		return nil, err
	}

	server := "https://127.0.0.1:" + strconv.Itoa(cfg.APIServerPort)
	if err := c.start("kube-apiserver", []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cfg.APIServerPort),
		"--cert-dir=" + cfg.pkiDir(),
		"--token-auth-file=" + tokenFile,
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC",
		// Pods of the local stack need no service-account token volume, and
		// without this plugin a pod created before the namespace's default
		// service account exists would be refused.
		"--disable-admission-plugins=ServiceAccount",
		// On in OpenShift and many hardened clusters: an owner reference
		// with blockOwnerDeletion needs `update` on the owner's finalizers
		// (deploy/'s RBAC grants it), which the e2e stack's services then
		// prove with every pod, Checkpoint and pool member they create.
		"--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		// MOLT_APISERVER_PROFILING=1 serves /debug/pprof (where a bench's
		// API-server CPU goes); off by default.
		"--profiling=" + strconv.FormatBool(os.Getenv("MOLT_APISERVER_PROFILING") == "1"),
		"--v=1",
	}); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, c, "kube-apiserver", server+"/readyz", token, 120*time.Second); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.Kubeconfig, []byte(kubeconfigYAML(server, token)), 0o600); err != nil {
		return nil, fmt.Errorf("write kubeconfig %s: %w", c.Kubeconfig, err)
	}
	c.RestConfig, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", c.Kubeconfig, err)
	}
	c.RestConfig.QPS, c.RestConfig.Burst = 200, 400
	cfg.Logf("kube-apiserver ready at %s", server)

	if err := c.start("kube-controller-manager", []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false",
		"--service-account-private-key-file=" + saKey,
		"--root-ca-file=" + filepath.Join(cfg.pkiDir(), "apiserver.crt"),
		"--use-service-account-credentials=false",
		"--controllers=namespace-controller,garbage-collector-controller,node-lifecycle-controller,pod-garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller",
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--node-monitor-grace-period=60s",
		"--v=1",
	}); err != nil {
		return nil, err
	}
	schedConfig, err := c.writeSchedulerConfig()
	if err != nil {
		return nil, err
	}
	if err := c.start("kube-scheduler", []string{
		"--config=" + schedConfig,
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--v=1",
	}); err != nil {
		return nil, err
	}
	kwokArgs := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
		"--cidr=" + cfg.PodCIDR,
		"--node-ip=127.0.0.1",
		"--node-lease-duration-seconds=40",
	}
	if cfg.KwokConfig != "" {
		kwokArgs = append(kwokArgs, "--config="+cfg.KwokConfig)
	}
	if err := c.start("kwok", kwokArgs); err != nil {
		return nil, err
	}

	kube, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return nil, fmt.Errorf("build kubernetes client: %w", err)
	}
	if cfg.CRDDir != "" {
		if err := InstallCRDs(ctx, c.RestConfig, cfg.CRDDir); err != nil {
			return nil, err
		}
		cfg.Logf("CRDs from %s established", cfg.CRDDir)
	}
	if len(cfg.AdmissionPolicies) > 0 {
		if err := InstallAdmissionPolicy(ctx, c.RestConfig, cfg.AdmissionPolicies...); err != nil {
			return nil, err
		}
		cfg.Logf("admission policies %s installed", strings.Join(cfg.AdmissionPolicies, ", "))
	}
	if err := EnsureNodes(ctx, kube, cfg.Nodes); err != nil {
		return nil, c.withLogs(err, "kwok", "kube-controller-manager")
	}
	cfg.Logf("%d kwok nodes ready", cfg.Nodes)
	return c, nil
}

// Launch starts another process next to the cluster, with the same log and
// pid-file handling (make up uses it for NATS and molt's services).
func (c Config) Launch(name, bin string, args, env []string) (*Process, error) {
	return startProcess(name, bin, args, c.logDir(), c.pidDir(), c.Detach, env)
}

// PidDir is where detached processes record their pids.
func (c Config) PidDir() string { return c.pidDir() }

// LogDir is where every process logs.
func (c Config) LogDir() string { return c.logDir() }

func (c *Cluster) start(name string, args []string) error {
	p, err := c.cfg.Launch(name, filepath.Join(c.cfg.BinDir, name), args, nil)
	if err != nil {
		return err
	}
	c.Processes = append(c.Processes, p)
	c.cfg.Logf("started %s (pid %d, log %s)", name, p.Cmd.Process.Pid, p.LogPath)
	return nil
}

// Stop stops every process in reverse start order; the API server gets a
// short grace period because it can hang once etcd is gone.
func (c *Cluster) Stop() {
	for i := len(c.Processes) - 1; i >= 0; i-- {
		c.Processes[i].Stop(3 * time.Second)
	}
	c.Processes = nil
}

// LogPath returns the log file of a component.
func (c *Cluster) LogPath(name string) string { return filepath.Join(c.cfg.logDir(), name+".log") }

func (c *Cluster) withLogs(err error, names ...string) error {
	for _, n := range names {
		err = fmt.Errorf("%w (see %s)", err, c.LogPath(n))
	}
	return err
}

func (c *Cluster) process(name string) *Process {
	for _, p := range c.Processes {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// ErrExitedAtStart is Start's error when a process of the cluster exited
// before it answered: most often a port it was given was taken meanwhile
// by another process (ports are picked free, then bound by the child).
var ErrExitedAtStart = errors.New("exited during start-up")

// waitHTTP polls url until it answers 200, the process exits, or timeout.
func waitHTTP(ctx context.Context, c *Cluster, name, url, token string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback dev cluster with a self-signed cert
	}}
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if p := c.process(name); p != nil && p.Exited() {
			return fmt.Errorf("%s %w: %v (see %s)", name, ErrExitedAtStart, p.Cmd.ProcessState, p.LogPath)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("status %s", resp.Status)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready at %s after %s: %v (see %s)", name, url, timeout, last, c.LogPath(name))
}

// FreePort asks the kernel for a free TCP port on loopback.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// SchedulerQPS and SchedulerBurst are the local scheduler's client-side rate
// limit. kube-scheduler's defaults (50 and 100) bind at most 50 pods a
// second, so an upgrade that recreates 1000 pods at once would wait 20 s for
// the scheduler alone; clusters that recreate pods in bulk raise them the
// same way (clientConnection in KubeSchedulerConfiguration).
const (
	SchedulerQPS   = 500
	SchedulerBurst = 1000
)

// writeSchedulerConfig writes the scheduler's KubeSchedulerConfiguration
// (kubeconfig, no leader election, SchedulerQPS) and returns its path.
func (c *Cluster) writeSchedulerConfig() (string, error) {
	path := filepath.Join(c.cfg.StateDir, "kube-scheduler.yaml")
	conf := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, c.Kubeconfig, SchedulerQPS, SchedulerBurst)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return "", fmt.Errorf("write kube-scheduler config: %w", err)
	}
	return path, nil
}
