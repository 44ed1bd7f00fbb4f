package devruntime

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The view of a pod with a root, as the init helper builds it in the
// command's own mount namespace (nothing here changes the host's mounts):
//
//	/bin /sbin /lib* /usr /etc  the host's, read-only (a symlink where the host has one)
//	/sys                        the host's, read-only, with everything mounted under it
//	/dev                        read-only: the host's null, zero, full, random, urandom
//	                            and tty, the fd links, and a writable tmpfs /dev/shm
//	/proc                       a new proc of the command's PID namespace, its kernel
//	                            settings (/proc/sys, /proc/sysrq-trigger, ...) read-only
//	everything else             the pod's root: /root, /home, /tmp, ..., writable
//	volumes                     bound over their mount paths, writable
//
// The host's directories, devices and the volumes are first cloned as
// detached mounts. Then the pod's root becomes the root of the namespace and
// the host's root is unmounted, and only then are the clones attached, at
// paths resolved inside the view: a symlink a command left in the pod's root
// resolves inside the view, never to the host's files.

// hostSystemDirs are the host's directories a view shows, read-only.
var hostSystemDirs = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc", "/sys"}

// viewDirs are the directories the view provides itself: no volume is
// mounted at or under them.
var viewDirs = append([]string{"/dev", "/proc"}, hostSystemDirs...)

// hostDevices are the host's device nodes in a view's /dev; devLinks are its
// symlinks.
var (
	hostDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}
	devLinks    = map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
)

// Of a view's /proc, procReadOnly change the kernel rather than the
// command's own processes, and procMasked show the kernel's memory and
// state; both lists are runc's defaults.
var (
	procReadOnly = []string{"bus", "fs", "irq", "sys", "sysrq-trigger"}
	procMasked   = []string{"acpi", "kcore", "keys", "latency_stats", "sched_debug", "scsi", "timer_list", "timer_stats"}
)

// podDirs are created in every pod root, with these modes.
var podDirs = []struct {
	path string
	mode os.FileMode
}{{"/root", 0o700}, {"/home", 0o755}, {"/tmp", os.ModeSticky | 0o777}}

// clone is a detached mount to attach at target inside the view.
type clone struct {
	fd     int
	target string
	dir    bool
}

// enterRoot builds the view of view.Root (see above) and makes it the
// command's root directory.
func enterRoot(view View) error {
	for _, m := range view.Mounts {
		if err := checkVolumeTarget(m.Target); err != nil {
			return err
		}
	}
	// Nothing mounted from here on may reach the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := os.MkdirAll(view.Root, 0o755); err != nil {
		return fmt.Errorf("create root %s: %w", view.Root, err)
	}

	var dirs, devices, volumes []clone
	defer func() {
		for _, c := range append(append(dirs, devices...), volumes...) {
			_ = unix.Close(c.fd)
		}
	}()
	links := map[string]string{}
	for _, d := range hostSystemDirs {
		c, link, err := cloneHostDir(d)
		switch {
		case err != nil:
			return err
		case link != "":
			links[d] = link
		case c != nil:
			dirs = append(dirs, *c)
		}
	}
	for _, name := range hostDevices {
		c, err := cloneHostDevice(name)
		if err != nil {
			return err
		}
		if c != nil {
			devices = append(devices, *c)
		}
	}
	for _, m := range view.Mounts {
		c, err := cloneVolume(m)
		if err != nil {
			return err
		}
		volumes = append(volumes, c)
	}

	if err := pivotInto(view.Root); err != nil {
		return err
	}
	// Every path from here on is inside the view.
	for d, target := range links {
		if err := os.Symlink(target, d); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("link %s: %w", d, err)
		}
	}
	for _, c := range dirs {
		if err := attach(c); err != nil {
			return err
		}
	}
	if err := mountDev(devices); err != nil {
		return err
	}
	if err := mountProc(); err != nil {
		return err
	}
	for _, d := range podDirs {
		if err := os.MkdirAll(d.path, d.mode.Perm()); err != nil {
			return fmt.Errorf("create %s: %w", d.path, err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("chmod %s: %w", d.path, err)
		}
	}
	for _, c := range volumes {
		if err := attach(c); err != nil {
			return fmt.Errorf("mount volume: %w", err)
		}
	}
	return nil
}

// checkVolumeTarget refuses a volume over the view's own directories.
func checkVolumeTarget(target string) error {
	if target == "/" {
		return errors.New("mount /: the development runtime cannot mount a volume over the root")
	}
	for _, d := range viewDirs {
		if target == d || strings.HasPrefix(target, d+"/") {
			return fmt.Errorf("mount %s: the development runtime cannot mount a volume under the host's %s", target, d)
		}
	}
	return nil
}

// cloneHostDir returns a read-only clone of the host's directory dir with
// everything mounted under it, or the target of dir when it is a symlink;
// nothing when the host has no dir.
func cloneHostDir(dir string) (*clone, string, error) {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("stat %s: %w", dir, err)
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(dir)
		if err != nil {
			return nil, "", fmt.Errorf("read link %s: %w", dir, err)
		}
		return nil, target, nil
	}
	fd, err := openTree(unix.AT_FDCWD, dir, unix.AT_RECURSIVE)
	if err != nil {
		return nil, "", fmt.Errorf("bind %s: %w", dir, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		_ = unix.Close(fd)
		return nil, "", fmt.Errorf("make %s read-only: %w", dir, kernelTooOld(err))
	}
	return &clone{fd: fd, target: dir, dir: true}, "", nil
}

// cloneHostDevice returns a clone of the host's /dev/<name>, nothing when
// the host has none.
func cloneHostDevice(name string) (*clone, error) {
	dev := "/dev/" + name
	if _, err := os.Stat(dev); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	fd, err := openTree(unix.AT_FDCWD, dev, 0)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", dev, err)
	}
	return &clone{fd: fd, target: dev}, nil
}

// cloneVolume returns a clone of volume m: its directory, or the
// directory m.SubPath inside it, created when missing. No symlink is
// followed inside the volume, whose files the pod writes.
func cloneVolume(m Mount) (clone, error) {
	if err := os.MkdirAll(m.Source, 0o755); err != nil {
		return clone{}, fmt.Errorf("create volume directory %s: %w", m.Source, err)
	}
	fd, err := unix.Open(m.Source, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return clone{}, fmt.Errorf("open volume directory %s: %w", m.Source, err)
	}
	for _, elem := range strings.Split(path.Clean("/"+m.SubPath), "/") {
		if elem == "" {
			continue
		}
		if err := unix.Mkdirat(fd, elem, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			_ = unix.Close(fd)
			return clone{}, fmt.Errorf("create subPath %s of the volume at %s: %w", m.SubPath, m.Target, err)
		}
		next, err := unix.Openat(fd, elem, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		_ = unix.Close(fd)
		if err != nil {
			return clone{}, fmt.Errorf("open subPath %s of the volume at %s (a symlink is refused): %w", m.SubPath, m.Target, err)
		}
		fd = next
	}
	tree, err := openTree(fd, "", unix.AT_EMPTY_PATH)
	_ = unix.Close(fd)
	if err != nil {
		return clone{}, fmt.Errorf("bind volume at %s: %w", m.Target, err)
	}
	return clone{fd: tree, target: m.Target, dir: true}, nil
}

// openTree clones the mount at dirfd/path as a detached bind mount.
func openTree(dirfd int, path string, flags uint) (int, error) {
	fd, err := unix.OpenTree(dirfd, path, unix.OPEN_TREE_CLONE|unix.O_CLOEXEC|flags)
	return fd, kernelTooOld(err)
}

// kernelTooOld says what a missing system call (open_tree, mount_setattr)
// means.
func kernelTooOld(err error) error {
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("%w (the development runtime needs Linux 5.12 or later)", err)
	}
	return err
}

// pivotInto makes root the root of the mount namespace and unmounts the
// host's root from it.
func pivotInto(root string) error {
	// pivot_root needs the new root to be a mount point.
	if err := unix.Mount(root, root, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind root %s: %w", root, err)
	}
	oldRoot, err := unix.Open("/", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the host's root: %w", err)
	}
	defer unix.Close(oldRoot)
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("change to root %s: %w", root, err)
	}
	// The host's root ends up mounted over the new one, then goes.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root to %s: %w", root, err)
	}
	if err := unix.Fchdir(oldRoot); err != nil {
		return fmt.Errorf("change to the host's root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("change to the new root: %w", err)
	}
	return nil
}

// attach mounts clone c at its target, creating the mount point. The target
// resolves inside the view; a symlink at the target itself is refused.
func attach(c clone) error {
	if c.dir {
		if err := os.MkdirAll(c.target, 0o755); err != nil {
			return fmt.Errorf("create mount point %s: %w", c.target, err)
		}
	} else {
		f, err := os.OpenFile(c.target, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return fmt.Errorf("create mount point %s: %w", c.target, err)
		}
		_ = f.Close()
	}
	if err := unix.MoveMount(c.fd, "", unix.AT_FDCWD, c.target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount %s: %w", c.target, err)
	}
	return nil
}

// mountDev mounts the view's /dev: a tmpfs with devices and devLinks, then
// read-only, and a writable /dev/shm.
func mountDev(devices []clone) error {
	if err := os.MkdirAll("/dev", 0o755); err != nil {
		return fmt.Errorf("create /dev: %w", err)
	}
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, c := range devices {
		if err := attach(c); err != nil {
			return err
		}
	}
	for name, target := range devLinks {
		if err := os.Symlink(target, filepath.Join("/dev", name)); err != nil {
			return fmt.Errorf("link /dev/%s: %w", name, err)
		}
	}
	if err := os.Mkdir("/dev/shm", 0o755); err != nil {
		return fmt.Errorf("create /dev/shm: %w", err)
	}
	if err := unix.Mount("shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=65536k"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	return remountReadOnly("/dev", unix.MS_NOSUID|unix.MS_NOEXEC)
}

// mountProc mounts a new proc at /proc, of the command's PID namespace, and
// makes procReadOnly read-only and procMasked empty.
func mountProc() error {
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := os.MkdirAll("/proc", 0o555); err != nil {
		return fmt.Errorf("create /proc: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", flags, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, name := range procReadOnly {
		p := "/proc/" + name
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", p, err)
		}
		if err := remountReadOnly(p, flags); err != nil {
			return err
		}
	}
	for _, name := range procMasked {
		p := "/proc/" + name
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("stat %s: %w", p, err)
		case fi.IsDir():
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|flags, "size=4k")
		default:
			err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	return nil
}

// remountReadOnly makes the mount at p read-only, keeping flags.
func remountReadOnly(p string, flags uintptr) error {
	if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", p, err)
	}
	return nil
}
