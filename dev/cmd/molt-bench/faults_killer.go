package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// killer kills and restarts the local stack's processes by their pid files
// (.molt/pids), with the command line and environment each was started
// with, and keeps the pid files current so `make down` stops the new ones.
type killer struct {
	pidDir  string
	logDir  string
	mu      sync.Mutex
	started map[string]*startedProc // processes this run started, by name
	crashed map[string]int          // processes that died without being killed
	images  map[string]procImageOf  // how each victim is started
}

type startedProc struct {
	pid    int
	exited chan struct{}
}

// newKiller reads the command line and environment of every victim now, so
// that one that dies on its own can be started again.
func newKiller(pidDir string) (*killer, error) {
	k := &killer{pidDir: pidDir, logDir: filepath.Join(filepath.Dir(pidDir), "logs"), started: map[string]*startedProc{},
		crashed: map[string]int{}, images: map[string]procImageOf{}}
	for _, name := range faultVictims {
		pid, _, err := k.pidOf(name)
		if err != nil {
			return nil, fmt.Errorf("%w (is the local stack up? make up)", err)
		}
		argv, env, err := procImage(pid)
		if err != nil {
			return nil, fmt.Errorf("read the command line of %s (pid %d): %w", name, pid, err)
		}
		k.images[name] = procImageOf{argv, env}
	}
	return k, nil
}

// procImageOf is how a process was started.
type procImageOf struct{ argv, env []string }

func (k *killer) pidOf(name string) (int, string, error) {
	data, err := os.ReadFile(filepath.Join(k.pidDir, name+".pid"))
	if err != nil {
		return 0, "", err
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0, "", fmt.Errorf("pid file of %s: %q is not \"<pid> <binary>\"", name, data)
	}
	pid, err := strconv.Atoi(f[0])
	return pid, f[1], err
}

// alive says whether name's process runs (a process this run started is
// alive until its Wait returns; another one while /proc shows it and it is
// not a zombie).
func (k *killer) alive(name string, pid int) bool {
	k.mu.Lock()
	p := k.started[name]
	k.mu.Unlock()
	if p != nil && p.pid == pid {
		select {
		case <-p.exited:
			return false
		default:
			return true
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// kill9AndRestart sends SIGKILL to name, waits for it to be gone, removes
// NATS's store when wipe is set, and after down starts it again as it was.
func (k *killer) kill9AndRestart(name string, down time.Duration, wipe bool) error {
	pid, _, err := k.pidOf(name)
	if err != nil {
		return err
	}
	img := k.images[name]
	proc, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 %s (pid %d): %w", name, pid, err)
	}
	for i := 0; i < 100 && k.alive(name, pid); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if wipe {
		if dir := flagValue(img.argv, "-sd"); dir != "" {
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("remove the NATS store %s: %w", dir, err)
			}
		}
	}
	time.Sleep(down)
	return k.start(name)
}

// reviveCrashed starts again every process of faultVictims that is not
// running, counting it as crashed: only the run's own kills may stop one.
// Several gone at once, or a pid file gone, is the stack being stopped
// (make down) rather than a crash: it starts nothing then and says so.
func (k *killer) reviveCrashed() error {
	var dead []string
	for _, name := range faultVictims {
		pid, _, err := k.pidOf(name)
		if err != nil {
			return fmt.Errorf("the pid file of %s is gone (%v): the local stack is being stopped; the run ends", name, err)
		}
		if !k.alive(name, pid) {
			dead = append(dead, name)
		}
	}
	if len(dead) > 1 {
		return fmt.Errorf("%s are all gone at once: the local stack is being stopped (make down?); the run ends", strings.Join(dead, ", "))
	}
	for _, name := range dead {
		k.mu.Lock()
		k.crashed[name]++
		k.mu.Unlock()
		fmt.Printf("  %s exited on its own; starting it again\n", name)
		if err := k.start(name); err != nil {
			fmt.Printf("  %v\n", err)
		}
	}
	return nil
}

// start starts name as it was started before, detached (in its own session,
// so it outlives the bench), logging where it logged, and writes its pid file.
func (k *killer) start(name string) error {
	img := k.images[name]
	logFile, err := os.OpenFile(filepath.Join(k.logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s again: %w", name, err)
	}
	defer logFile.Close()
	cmd := exec.Command(img.argv[0], img.argv[1:]...)
	cmd.Env = img.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s again: %w", name, err)
	}
	p := &startedProc{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	k.mu.Lock()
	k.started[name] = p
	k.mu.Unlock()
	return os.WriteFile(filepath.Join(k.pidDir, name+".pid"), []byte(fmt.Sprintf("%d %s\n", p.pid, img.argv[0])), 0o644)
}

// procImage reads a process's command line and environment from /proc.
func procImage(pid int) (argv, env []string, err error) {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, nil, err
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil, nil, err
	}
	split := func(b []byte) []string { return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00") }
	argv = split(cmdline)
	if len(argv) == 0 || argv[0] == "" {
		return nil, nil, fmt.Errorf("empty command line")
	}
	return argv, split(environ), nil
}

// flagValue is the value after flag in argv ("-sd DIR"), or "".
func flagValue(argv []string, flag string) string {
	for i, a := range argv {
		if a == flag && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}
