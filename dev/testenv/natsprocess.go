package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"molt.dev/dev/devcluster"
)

// NATSProcess is a NATS server with JetStream run as its own OS process
// (bin/nats-server, built from the module version the harness embeds), for
// tests that kill it: Kill9 takes it down as a crash would, Start brings it
// back on the same port and store. The harness's in-process server (Env.NATS)
// cannot be killed that way. It runs with the users and permissions of
// deploy/nats/auth.conf, like every NATS of the tests.
type NATSProcess struct {
	// URL is where clients connect; it stays the same across restarts.
	URL string
	// StoreDir is the JetStream store, kept across restarts.
	StoreDir string
	// LogPath is the server's log; every start appends to it.
	LogPath string

	launcher devcluster.Config
	name     string
	bin      string
	args     []string
	env      []string
	admin    nats.Option
	proc     *devcluster.Process
}

// StartNATSProcess starts bin/nats-server on a free port, with
// deploy/nats/auth.conf and its store and log under stateDir, and waits until
// JetStream answers. The process dies with the test binary. The port is free
// when chosen, not when the server binds it: a server that exits at start-up
// is tried again on another port.
func (e *Env) StartNATSProcess(stateDir string) (*NATSProcess, error) {
	for attempt := 1; ; attempt++ {
		port, err := devcluster.FreePort()
		if err != nil {
			return nil, err
		}
		n := e.natsProcess("nats-server", stateDir, port, []string{
			"-c", devcluster.NATSAuthConf(e.RootDir), "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js",
			"-sd", filepath.Join(stateDir, "jetstream"), "-n", "molt-test",
		}, nil)
		err = n.Start()
		if err == nil || attempt == 3 || !errors.Is(err, errExitedAtStart) {
			return n, err
		}
	}
}

// errExitedAtStart: the server exited before JetStream answered, as it does
// when its port is taken.
var errExitedAtStart = errors.New("exited during start-up")

// natsProcess is a NATSProcess named name (its log), not started, that
// clients reach on port.
func (e *Env) natsProcess(name, stateDir string, port int, args, env []string) *NATSProcess {
	n := &NATSProcess{
		URL:      fmt.Sprintf("nats://127.0.0.1:%d", port),
		StoreDir: filepath.Join(stateDir, "jetstream"),
		launcher: devcluster.Config{BinDir: filepath.Join(e.RootDir, "bin"), StateDir: stateDir},
		name:     name,
		bin:      filepath.Join(e.RootDir, "bin", "nats-server"),
		args:     args,
		env:      env,
		admin:    nats.UserInfo("admin", e.NATSPasswords.Password("admin")),
	}
	n.LogPath = filepath.Join(n.launcher.LogDir(), name+".log")
	return n
}

// Start starts the server (again) on its port and store and waits up to 30s
// until JetStream answers. A restart must have the same port, which another
// process may hold for a moment (a free-port probe, a short connection): a
// server that exits at start-up is launched again, up to 5 times a second
// apart.
func (n *NATSProcess) Start() error {
	for attempt := 1; ; attempt++ {
		if err := n.launch(); err != nil {
			return err
		}
		err := n.waitJetStream(30 * time.Second)
		if err == nil {
			return nil
		}
		if attempt == 5 || !errors.Is(err, errExitedAtStart) {
			return fmt.Errorf("nats-server on %s (log %s): %w", n.URL, n.LogPath, err)
		}
		time.Sleep(time.Second)
	}
}

// launch starts the process without waiting for JetStream (a cluster node
// has none until a quorum of its peers runs).
func (n *NATSProcess) launch() error {
	if n.proc != nil && !n.proc.Exited() {
		return fmt.Errorf("start %s on %s: it is still running (pid %d)", n.name, n.URL, n.proc.Cmd.Process.Pid)
	}
	p, err := n.launcher.Launch(n.name, n.bin, n.args, n.env)
	if err != nil {
		return err
	}
	n.proc = p
	return nil
}

// waitJetStream polls until a client can connect and JetStream answers an
// account info request.
func (n *NATSProcess) waitJetStream(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if n.proc.Exited() {
			return errExitedAtStart
		}
		if last = n.jetStreamAnswers(); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("JetStream did not answer within %s: %w", timeout, last)
}

func (n *NATSProcess) jetStreamAnswers() error {
	nc, err := nats.Connect(n.URL, nats.Timeout(time.Second), n.admin)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// Kill9 kills the server with SIGKILL and waits until it is gone.
func (n *NATSProcess) Kill9() error {
	if n.proc == nil || n.proc.Exited() {
		return fmt.Errorf("kill -9 %s on %s: it is not running", n.name, n.URL)
	}
	if err := n.proc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 %s (pid %d): %w", n.name, n.proc.Cmd.Process.Pid, err)
	}
	if !n.proc.WaitExit(10 * time.Second) {
		return fmt.Errorf("%s (pid %d) still runs 10s after SIGKILL", n.name, n.proc.Cmd.Process.Pid)
	}
	return nil
}

// Stop stops the server (SIGTERM, then SIGKILL after 5s).
func (n *NATSProcess) Stop() {
	if n.proc != nil {
		n.proc.Stop(5 * time.Second)
	}
}

// NATSCluster is a JetStream cluster of NATS processes on loopback ports,
// each run from deploy/nats/nats.conf (the StatefulSet's config) with the
// environment that StatefulSet sets, so the test runs what a cluster runs.
type NATSCluster struct {
	Nodes []*NATSProcess
	// URLs are the client URLs of every node, comma-separated (--nats-url).
	URLs string
}

// StartNATSCluster starts size nodes under stateDir and waits until
// JetStream answers on each.
func (e *Env) StartNATSCluster(stateDir string, size int) (*NATSCluster, error) {
	clientPorts, routePorts := make([]int, size), make([]int, size)
	for i := range size {
		var err error
		if clientPorts[i], err = devcluster.FreePort(); err != nil {
			return nil, err
		}
		if routePorts[i], err = devcluster.FreePort(); err != nil {
			return nil, err
		}
	}
	// The routes log in as the StatefulSet's do: user route, the password
	// of the Secret molt-nats-route in NATS_ROUTE_PASSWORD and in each URL.
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("make the NATS route password: %w", err)
	}
	routePassword := hex.EncodeToString(raw)
	routes := "["
	for i, p := range routePorts {
		if i > 0 {
			routes += ", "
		}
		routes += fmt.Sprintf("\"nats-route://route:%s@127.0.0.1:%d\"", routePassword, p)
	}
	routes += "]"
	c := &NATSCluster{}
	conf := filepath.Join(e.RootDir, "deploy", "nats", "nats.conf")
	for i := range size {
		name := fmt.Sprintf("nats-%d", i)
		dir := filepath.Join(stateDir, name)
		n := e.natsProcess(name, dir, clientPorts[i], []string{"-c", conf, "-a", "127.0.0.1"}, []string{
			"NATS_SERVER_NAME=" + name,
			"NATS_CLIENT_PORT=" + strconv.Itoa(clientPorts[i]),
			"NATS_CLUSTER_PORT=" + strconv.Itoa(routePorts[i]),
			"NATS_MONITOR_PORT=0",
			"NATS_ROUTES=" + routes,
			"NATS_ROUTE_PASSWORD=" + routePassword,
			"NATS_STORE_DIR=" + filepath.Join(dir, "jetstream"),
		})
		c.Nodes = append(c.Nodes, n)
		if i > 0 {
			c.URLs += ","
		}
		c.URLs += n.URL
	}
	for _, n := range c.Nodes {
		if err := n.launch(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, n := range c.Nodes {
		if err := n.waitJetStream(60 * time.Second); err != nil {
			c.Stop()
			return nil, fmt.Errorf("%s on %s (log %s): %w", n.name, n.URL, n.LogPath, err)
		}
	}
	return c, nil
}

// Stop stops every node.
func (c *NATSCluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}
