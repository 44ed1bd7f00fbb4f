package devruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// initArg0 is argv[0] of this executable re-run as the init helper.
const initArg0 = "molt-devruntime-init"

// envSpec carries the JSON initSpec to the init helper; it is removed from
// the command's environment.
const envSpec = "MOLT_DEVRUNTIME_INIT"

// initSpec is what the init helper sets up before it execs the command.
type initSpec struct {
	View View `json:"view"`
	// Dir is the command's working directory inside the view.
	Dir string `json:"dir"`
}

// initErrFD is the init helper's error pipe: closed on a successful exec,
// written with the reason otherwise.
const initErrFD = 3

// MaybeRunInit returns at once, unless this process was started as the init
// helper of a command: then it sets up the command's view and execs it, and
// never returns. Call it first thing in main and in TestMain.
func MaybeRunInit() {
	if len(os.Args) == 0 || os.Args[0] != initArg0 {
		return
	}
	err := runInit(os.Args[1:])
	report := os.NewFile(initErrFD, "init-error")
	fmt.Fprint(report, err.Error())
	os.Exit(127)
}

// runInit runs as pid 1 of the command's new PID, mount and UTS namespaces
// (see startCommand): it builds the view (enterRoot), sets the hostname,
// drops the capabilities a command of a view must not have, then execs
// argv, which becomes that pid 1. It returns only on failure.
func runInit(argv []string) error {
	// Capabilities are per thread: drop them on the thread that execs.
	runtime.LockOSThread()
	syscall.CloseOnExec(initErrFD)
	var spec initSpec
	if err := json.Unmarshal([]byte(os.Getenv(envSpec)), &spec); err != nil {
		return fmt.Errorf("decode %s: %w", envSpec, err)
	}
	if err := os.Unsetenv(envSpec); err != nil {
		return fmt.Errorf("unset %s: %w", envSpec, err)
	}
	view := spec.View
	if view.Root != "" {
		if err := enterRoot(view); err != nil {
			return err
		}
	}
	if view.Hostname != "" {
		if err := syscall.Sethostname([]byte(view.Hostname)); err != nil {
			return fmt.Errorf("set hostname %s: %w", view.Hostname, err)
		}
	}
	if spec.Dir != "" {
		if err := os.Chdir(spec.Dir); err != nil {
			return fmt.Errorf("change to working directory: %w", err)
		}
	}
	if len(argv) == 0 {
		return errors.New("no command")
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	if view.Root != "" {
		if err := dropCapabilities(); err != nil {
			return err
		}
	}
	return syscall.Exec(bin, argv, os.Environ())
}
