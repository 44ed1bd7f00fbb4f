package devruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// hostDirs are bound from the host into every pod root (or linked, where
// the host has a symlink such as /bin -> usr/bin).
var hostDirs = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc", "/dev", "/proc", "/sys"}

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

// runInit runs in the command's new mount and UTS namespaces: it builds the
// view, then execs argv. It returns only on failure.
func runInit(argv []string) error {
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
	return syscall.Exec(bin, argv, os.Environ())
}

// enterRoot builds view.Root (host directories, the pod's private
// directories, the volumes) and chroots into it.
func enterRoot(view View) error {
	// Nothing mounted from here on may reach the host.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	root := view.Root
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create root %s: %w", root, err)
	}
	for _, d := range hostDirs {
		if err := bindHostDir(root, d); err != nil {
			return err
		}
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"/root", 0o700}, {"/home", 0o755}, {"/tmp", 0o1777}} {
		if err := os.MkdirAll(filepath.Join(root, d.path), d.mode); err != nil {
			return fmt.Errorf("create %s: %w", d.path, err)
		}
		if err := os.Chmod(filepath.Join(root, d.path), d.mode); err != nil {
			return fmt.Errorf("chmod %s: %w", d.path, err)
		}
	}
	for _, m := range view.Mounts {
		if err := bindVolume(root, m); err != nil {
			return err
		}
	}
	if err := syscall.Chroot(root); err != nil {
		return fmt.Errorf("chroot %s: %w", root, err)
	}
	if err := os.Chdir("/"); err != nil {
		return fmt.Errorf("change to the new root: %w", err)
	}
	return nil
}

func bindHostDir(root, dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	at := filepath.Join(root, dir)
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(dir)
		if err != nil {
			return fmt.Errorf("read link %s: %w", dir, err)
		}
		if err := os.Symlink(target, at); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("link %s: %w", dir, err)
		}
		return nil
	}
	if err := os.MkdirAll(at, 0o755); err != nil {
		return fmt.Errorf("create mount point %s: %w", at, err)
	}
	if err := syscall.Mount(dir, at, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dir, err)
	}
	return nil
}

func bindVolume(root string, m Mount) error {
	for _, d := range hostDirs {
		if m.Target == d || strings.HasPrefix(m.Target, d+"/") {
			return fmt.Errorf("mount %s: the development runtime cannot mount a volume under the host's %s", m.Target, d)
		}
	}
	if err := os.MkdirAll(m.Source, 0o755); err != nil {
		return fmt.Errorf("create volume directory %s: %w", m.Source, err)
	}
	at := filepath.Join(root, m.Target)
	if err := os.MkdirAll(at, 0o755); err != nil {
		return fmt.Errorf("create mount point %s: %w", m.Target, err)
	}
	if err := syscall.Mount(m.Source, at, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount volume at %s: %w", m.Target, err)
	}
	return nil
}
