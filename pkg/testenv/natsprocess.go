package testenv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"molt.dev/pkg/devcluster"
)

// NATSProcess is a NATS server with JetStream run as its own OS process
// (bin/nats-server, built from the module version the harness embeds), for
// tests that kill it: Kill9 takes it down as a crash would, Start brings it
// back on the same port and store. The harness's in-process server (Env.NATS)
// cannot be killed that way.
type NATSProcess struct {
	// URL is where clients connect; it stays the same across restarts.
	URL string
	// StoreDir is the JetStream store, kept across restarts.
	StoreDir string
	// LogPath is the server's log; every start appends to it.
	LogPath string

	launcher devcluster.Config
	bin      string
	port     int
	proc     *devcluster.Process
}

// StartNATSProcess starts bin/nats-server from binDir on a free port, with
// its store and log under stateDir, and waits until JetStream answers. The
// process dies with the test binary.
func StartNATSProcess(binDir, stateDir string) (*NATSProcess, error) {
	port, err := devcluster.FreePort()
	if err != nil {
		return nil, err
	}
	n := &NATSProcess{
		URL:      fmt.Sprintf("nats://127.0.0.1:%d", port),
		StoreDir: filepath.Join(stateDir, "jetstream"),
		launcher: devcluster.Config{BinDir: binDir, StateDir: stateDir},
		bin:      filepath.Join(binDir, "nats-server"),
		port:     port,
	}
	n.LogPath = filepath.Join(n.launcher.LogDir(), "nats-server.log")
	return n, n.Start()
}

// Start starts the server (again) on its port and store and waits up to 30s
// until JetStream answers.
func (n *NATSProcess) Start() error {
	if n.proc != nil && !n.proc.Exited() {
		return fmt.Errorf("start nats-server on %s: it is still running (pid %d)", n.URL, n.proc.Cmd.Process.Pid)
	}
	p, err := n.launcher.Launch("nats-server", n.bin, []string{
		"-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-js", "-sd", n.StoreDir, "-n", "molt-test",
	}, nil)
	if err != nil {
		return err
	}
	n.proc = p
	if err := n.waitJetStream(30 * time.Second); err != nil {
		return fmt.Errorf("nats-server on %s (log %s): %w", n.URL, n.LogPath, err)
	}
	return nil
}

// waitJetStream polls until a client can connect and JetStream answers an
// account info request.
func (n *NATSProcess) waitJetStream(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if n.proc.Exited() {
			return errors.New("exited during start-up")
		}
		if last = n.jetStreamAnswers(); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("JetStream did not answer within %s: %w", timeout, last)
}

func (n *NATSProcess) jetStreamAnswers() error {
	nc, err := nats.Connect(n.URL, nats.Timeout(time.Second))
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
		return fmt.Errorf("kill -9 nats-server on %s: it is not running", n.URL)
	}
	if err := n.proc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 nats-server (pid %d): %w", n.proc.Cmd.Process.Pid, err)
	}
	if !n.proc.WaitExit(10 * time.Second) {
		return fmt.Errorf("nats-server (pid %d) still runs 10s after SIGKILL", n.proc.Cmd.Process.Pid)
	}
	return nil
}

// Stop stops the server (SIGTERM, then SIGKILL after 5s).
func (n *NATSProcess) Stop() {
	if n.proc != nil {
		n.proc.Stop(5 * time.Second)
	}
}
