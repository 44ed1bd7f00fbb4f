package devruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"time"
)

// defaultPath is the PATH of a command that sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// drainGrace is how long output is still read after the command exited,
// in case a process it left behind holds its stdout or stderr open.
const drainGrace = time.Second

// command is one running process of a view.
type command struct {
	cmd            *exec.Cmd
	stdout, stderr *os.File
}

// startCommand starts argv in view through the init helper. Its error is
// what the agent-runtime reports in the end event: the view could not be
// set up or the command could not be executed.
func startCommand(view View, argv []string, envs map[string]string, dir string) (*command, error) {
	if dir == "" {
		dir = "/root"
		if view.Root == "" {
			dir = "/"
		}
	}
	spec, err := json.Marshal(initSpec{View: view, Dir: dir})
	if err != nil {
		return nil, fmt.Errorf("encode view: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, fmt.Errorf("create stderr pipe: %w", err)
	}
	reportR, reportW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW, errR, errW)
		return nil, fmt.Errorf("create init pipe: %w", err)
	}
	defer closeAll(outW, errW, reportR, reportW)

	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        append([]string{initArg0}, argv...),
		Env:         append(commandEnv(view, envs), envSpec+"="+string(spec)),
		Stdout:      outW,
		Stderr:      errW,
		ExtraFiles:  []*os.File{reportW}, // fd 3, initErrFD
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	switch {
	case view.Root != "":
		// The init helper, then the command, is pid 1 of its own PID
		// namespace: it sees and signals only its own processes, and when
		// it exits the kernel kills whatever it left behind.
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWPID
	case view.Hostname != "":
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS
	}
	if err := cmd.Start(); err != nil {
		closeAll(outR, errR)
		return nil, fmt.Errorf("start init helper: %w", err)
	}
	reportW.Close()
	// The init helper's report pipe closes on exec, or carries its error.
	report, _ := io.ReadAll(reportR)
	if len(report) > 0 {
		_ = cmd.Wait()
		closeAll(outR, errR)
		return nil, errors.New(string(report))
	}
	return &command{cmd: cmd, stdout: outR, stderr: errR}, nil
}

// commandEnv is the environment of a command: root's, then envs.
func commandEnv(view View, envs map[string]string) []string {
	base := map[string]string{"PATH": defaultPath, "HOME": "/root", "USER": "root", "LANG": "C.UTF-8"}
	if view.Hostname != "" {
		base["HOSTNAME"] = view.Hostname
	}
	for k, v := range envs {
		base[k] = v
	}
	env := make([]string, 0, len(base))
	for k, v := range base {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// signal sends sig to the command and whatever it started (its process
// group; with a root of its own, its whole PID namespace dies with it).
func (c *command) signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("signal %v is not a unix signal", sig)
	}
	return syscall.Kill(-c.cmd.Process.Pid, s)
}

// exitOf returns a finished command's exit code (negative for the signal
// that killed it), whether it exited, and its status text.
func exitOf(state *os.ProcessState) (code int32, exited bool, status string) {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -int32(ws.Signal()), false, state.String()
	}
	return int32(state.ExitCode()), state.Exited(), state.String()
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}
