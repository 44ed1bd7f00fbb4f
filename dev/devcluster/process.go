package devcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one component started by this package.
type Process struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string
	PidPath string
	exited  chan struct{}
}

// startProcess starts bin with args, logging to logDir/<name>.log. When
// detach is true the process gets its own session so it outlives the caller,
// and its pid is written to pidDir/<name>.pid.
func startProcess(name, bin string, args []string, logDir, pidDir string, detach bool, env []string) (*Process, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("start %s: binary %s is missing: run `make %s` first: %w", name, bin, relBin(bin), err)
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("start %s: create log dir: %w", name, err)
	}
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: open log %s: %w", name, logPath, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), env...)
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		// Die with the parent (a test binary killed by a timeout must not
		// leave a control plane behind).
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	logFile.Close()
	p := &Process{Name: name, Cmd: cmd, LogPath: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	if detach {
		if err := os.MkdirAll(pidDir, 0o755); err != nil {
			return nil, fmt.Errorf("start %s: create pid dir: %w", name, err)
		}
		p.PidPath = filepath.Join(pidDir, name+".pid")
		content := fmt.Sprintf("%d %s\n", cmd.Process.Pid, bin)
		if err := os.WriteFile(p.PidPath, []byte(content), 0o644); err != nil {
			return nil, fmt.Errorf("start %s: write pid file: %w", name, err)
		}
	}
	return p, nil
}

// Exited reports whether the process has already ended.
func (p *Process) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// WaitExit waits up to timeout for the process to end and reports whether it did.
func (p *Process) WaitExit(timeout time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Stop sends SIGTERM and escalates to SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
		<-p.exited
	}
	if p.PidPath != "" {
		_ = os.Remove(p.PidPath)
	}
}

// PidFile is a pid file written by a detached start.
type PidFile struct {
	Name string
	Path string
	Pid  int
	Bin  string
}

// ReadPidFiles lists the pid files in dir.
func ReadPidFiles(dir string) ([]PidFile, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pid dir %s: %w", dir, err)
	}
	var out []PidFile
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".pid") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read pid file %s: %w", path, err)
		}
		fields := strings.Fields(string(data))
		if len(fields) < 2 {
			continue
		}
		pid, err := strconv.Atoi(fields[0])
		if err != nil {
			continue
		}
		out = append(out, PidFile{Name: strings.TrimSuffix(e.Name(), ".pid"), Path: path, Pid: pid, Bin: fields[1]})
	}
	return out, nil
}

// Alive reports whether the pid still runs the binary it was started from, so
// that a recycled pid is never signalled.
func (f PidFile) Alive() bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", f.Pid))
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	return exe == f.Bin
}

// StopPid stops a detached process: SIGTERM to its session, then SIGKILL after
// grace. It removes the pid file.
func (f PidFile) StopPid(grace time.Duration) error {
	defer os.Remove(f.Path)
	if !f.Alive() {
		return nil
	}
	// The process leads its own session and process group (Setsid).
	_ = syscall.Kill(-f.Pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !f.Alive() {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-f.Pid, syscall.SIGKILL)
	for i := 0; i < 50 && f.Alive(); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if f.Alive() {
		return fmt.Errorf("stop %s (pid %d): still running after SIGKILL", f.Name, f.Pid)
	}
	return nil
}

func relBin(bin string) string {
	return "bin/" + filepath.Base(bin)
}
