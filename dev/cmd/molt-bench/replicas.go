package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"molt.dev/dev/devcluster"
)

// scaledServices are the services a replica run scales out; the other two
// elect a leader, so extra replicas of them would only wait.
var scaledServices = []struct {
	name string
	// port is the first health/metrics port of its extra replicas.
	port int
}{{"patcher", 9112}, {"hookrunner", 9113}, {"podcycler", 9114}}

// podcyclerAddrs are the HTTP addresses of the stack's podcycler and of the
// extra replicas a run may start (9114, 9124: port+10*(i-2) below).
var podcyclerAddrs = []string{"127.0.0.1:9104", "127.0.0.1:9114", "127.0.0.1:9124"}

// replicas are the extra service processes the bench started for one run,
// beside the one of each `make up` runs. Their logs are next to the stack's.
type replicas struct {
	procs []*replica
}

type replica struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// startReplicas starts n-1 extra replicas of each scaled service, with the
// flags `make up` gives the first one and their own health address, and
// waits until each is ready.
func startReplicas(ctx context.Context, c config, n int) (*replicas, error) {
	r := &replicas{}
	stateDir := filepath.Dir(c.pidDir)
	passwords, err := devcluster.LoadNATSPasswords(filepath.Join(stateDir, "nats-auth"))
	if err != nil {
		return r, err
	}
	for _, s := range scaledServices {
		for i := 2; i <= n; i++ {
			name := fmt.Sprintf("%s-%d", s.name, i)
			addr := fmt.Sprintf("127.0.0.1:%d", s.port+10*(i-2))
			logPath := filepath.Join(stateDir, "logs", "bench-"+name+".log")
			log, err := os.Create(logPath)
			if err != nil {
				return r, fmt.Errorf("create log of replica %s: %w", name, err)
			}
			cmd := exec.Command(filepath.Join(c.binDir, s.name), append([]string{
				"--kubeconfig=" + c.kubeconfig, "--nats-url=" + c.natsURL, "--http-addr=" + addr,
			}, passwords.ServiceArgs(s.name)...)...)
			cmd.Stdout, cmd.Stderr = log, log
			if err := cmd.Start(); err != nil {
				log.Close()
				return r, fmt.Errorf("start replica %s: %w", name, err)
			}
			p := &replica{name: name, cmd: cmd, exited: make(chan struct{})}
			go func() { _ = cmd.Wait(); log.Close(); close(p.exited) }()
			r.procs = append(r.procs, p)
			if err := waitReady(ctx, p, "http://"+addr+"/readyz"); err != nil {
				return r, fmt.Errorf("replica %s (log %s): %w", name, logPath, err)
			}
			fmt.Printf("  started replica %s (pid %d, http://%s)\n", name, cmd.Process.Pid, addr)
		}
	}
	return r, nil
}

func waitReady(ctx context.Context, p *replica, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return errors.New("exited before it was ready")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready at %s after 60s", url)
}

func (r *replicas) processes() []process {
	var out []process
	for _, p := range r.procs {
		out = append(out, process{name: p.name, pid: p.cmd.Process.Pid})
	}
	return out
}

// peakRSS is VmHWM in kB of every replica still running.
func (r *replicas) peakRSS() map[string]int64 {
	out := map[string]int64{}
	for _, p := range r.procs {
		if kb, ok := vmHWM(p.cmd.Process.Pid); ok {
			out[p.name] = kb
		}
	}
	return out
}

// stop sends SIGTERM to every replica and waits for it, SIGKILL after 10s.
func (r *replicas) stop() {
	for _, p := range r.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range r.procs {
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}
