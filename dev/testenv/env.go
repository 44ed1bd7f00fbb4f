package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"molt.dev/dev/devcluster"
	"molt.dev/dev/devnode"
	"molt.dev/dev/devruntime"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/service"
)

// Env is what every test of a package shares.
type Env struct {
	// RootDir is the repository root (the directory holding go.work).
	RootDir    string
	Cluster    *devcluster.Cluster
	RestConfig *rest.Config
	Kube       kubernetes.Interface
	NATS       *natsserver.Server
	NATSURL    string
	// NATSPasswords are the passwords of deploy/nats/auth.conf's users on
	// NATS (and on every NATSProcess a test starts): connect with
	// NATSConnect, start a service with NATSAuth.
	NATSPasswords *devcluster.NATSPasswords
	// Kubeconfig is a kubeconfig file for the cluster (for kubectl).
	Kubeconfig string

	stateDir string
	podRange *podRange
	stop     context.CancelFunc
	done     chan struct{}
}

var current *Env

// Required binaries, each with the make target that builds it.
var requiredBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// Main starts the environment, runs the package's tests and stops it. Use it
// as `func TestMain(m *testing.M) { testenv.Main(m) }`.
func Main(m *testing.M) {
	// The development agent-runtime re-executes the test binary to set up
	// a pod's filesystem view; that child must not run the tests.
	devruntime.MaybeRunInit()
	env, err := Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		os.Exit(1)
	}
	current = env
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// Get returns the environment Main started; it fails the test if there is none.
func Get(t testing.TB) *Env {
	t.Helper()
	if current == nil {
		t.Fatal("testenv: no environment: add `func TestMain(m *testing.M) { testenv.Main(m) }` to the package")
	}
	return current
}

// Start brings the whole environment up.
func Start() (*Env, error) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	binDir := filepath.Join(root, "bin")
	var missing []string
	for _, b := range requiredBinaries {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			missing = append(missing, "bin/"+b)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing %v: run `make tools` in %s (it builds the control plane from pinned modules)", missing, root)
	}
	stateDir, err := os.MkdirTemp("", "molt-testenv-")
	if err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	// A loopback range of this environment's own, so that test packages
	// running side by side (and `make up`, on 127.100.0.0/16) never serve
	// each other's pod IPs.
	pods, err := reservePodRange()
	if err != nil {
		_ = os.RemoveAll(stateDir)
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	env := &Env{RootDir: root, stateDir: stateDir, podRange: pods, stop: cancel, done: make(chan struct{})}

	startCtx, startCancel := context.WithTimeout(ctx, 4*time.Minute)
	defer startCancel()
	var cluster *devcluster.Cluster
	for attempt := 1; ; attempt++ {
		cluster, err = devcluster.Start(startCtx, devcluster.Config{
			BinDir:     binDir,
			StateDir:   stateDir,
			Nodes:      3,
			KwokConfig: filepath.Join(root, "deploy", "kwok", "stages.yaml"),
			PodCIDR:    pods.CIDR(),
			CRDDir:     filepath.Join(root, "deploy", "crds"),
		})
		if err == nil || attempt == 3 || !errors.Is(err, devcluster.ErrExitedAtStart) {
			break
		}
		// A port picked free was taken by a test package starting beside
		// this one before the child bound it: again, on new ports and a
		// clean state.
		fmt.Fprintf(os.Stderr, "testenv: %v; starting the control plane again\n", err)
		if rerr := os.RemoveAll(stateDir); rerr != nil {
			err = errors.Join(err, rerr)
			break
		}
	}
	if err != nil {
		cancel()
		pods.release()
		return nil, fmt.Errorf("start control plane (state and logs in %s): %w", stateDir, err)
	}
	env.Cluster = cluster
	env.RestConfig = cluster.RestConfig
	env.Kubeconfig = cluster.Kubeconfig
	env.Kube, err = kubernetes.NewForConfig(cluster.RestConfig)
	if err != nil {
		env.Stop()
		return nil, fmt.Errorf("build kubernetes client: %w", err)
	}

	env.NATSPasswords, err = devcluster.LoadNATSPasswords(filepath.Join(stateDir, "nats-auth"))
	if err != nil {
		env.Stop()
		return nil, err
	}
	// auth.conf reads the passwords from the environment; NATS processes
	// that tests start inherit it.
	for _, kv := range env.NATSPasswords.ServerEnv() {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			env.Stop()
			return nil, err
		}
	}
	env.NATS, err = StartNATS(devcluster.NATSAuthConf(root), filepath.Join(stateDir, "jetstream"))
	if err != nil {
		env.Stop()
		return nil, err
	}
	env.NATSURL = env.NATS.ClientURL()

	agents, err := versioned.NewForConfig(cluster.RestConfig)
	if err != nil {
		env.Stop()
		return nil, fmt.Errorf("build agents client: %w", err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := devnode.RunReaper(ctx, env.Kube); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(os.Stderr, "testenv: devnode reaper: %v\n", err)
		}
	}()
	go func() {
		defer wg.Done()
		err := devruntime.Serve(ctx, devruntime.Config{Kube: env.Kube, Agents: agents, StateDir: filepath.Join(stateDir, "devruntime")})
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(os.Stderr, "testenv: development agent-runtime: %v\n", err)
		}
	}()
	go func() { wg.Wait(); close(env.done) }()
	return env, nil
}

// Stop stops everything Start started and removes the state directory,
// unless MOLT_KEEP_TESTENV is set (to read the component logs).
func (e *Env) Stop() {
	e.stop()
	if e.Kube != nil {
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
		}
	}
	if e.NATS != nil {
		e.NATS.Shutdown()
		e.NATS.WaitForShutdown()
	}
	if e.Cluster != nil {
		e.Cluster.Stop()
	}
	// Nothing serves the range's pod IPs any more.
	e.podRange.release()
	if os.Getenv("MOLT_KEEP_TESTENV") == "" {
		_ = os.RemoveAll(e.stateDir)
	} else {
		fmt.Fprintf(os.Stderr, "testenv: state and logs kept in %s\n", e.stateDir)
	}
}

// StartNATS starts an in-process NATS server with JetStream on a free port,
// with the users and permissions of authConf (deploy/nats/auth.conf; its
// passwords must be in the environment, see NATSPasswords.ServerEnv).
func StartNATS(authConf, storeDir string) (*natsserver.Server, error) {
	opts, err := natsserver.ProcessConfigFile(authConf)
	if err != nil {
		return nil, fmt.Errorf("load NATS auth config: %w", err)
	}
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.JetStream, opts.StoreDir = true, storeDir
	opts.NoLog, opts.NoSigs = true, true
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("create NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("NATS server not ready for connections after 10s")
	}
	return srv, nil
}

// NATSAuth is how a service logs in to the test NATS as user (one of
// devcluster.NATSUsers).
func (e *Env) NATSAuth(user string) service.NATSAuth {
	return service.NATSAuth{User: user, PasswordFile: e.NATSPasswords.File(user)}
}

// NATSConnect connects to url (the harness's NATS when empty) as user; the
// connection is closed when the test ends.
func (e *Env) NATSConnect(t testing.TB, url, user string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	if url == "" {
		url = e.NATSURL
	}
	nc, err := nats.Connect(url, append([]nats.Option{
		nats.UserInfo(user, e.NATSPasswords.Password(user)), nats.CustomInboxPrefix(service.InboxPrefix(user)),
	}, opts...)...)
	if err != nil {
		t.Fatalf("connect to NATS at %s as %s: %v", url, user, err)
	}
	t.Cleanup(nc.Close)
	return nc
}
