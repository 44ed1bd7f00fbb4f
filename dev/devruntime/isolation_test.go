package devruntime_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"molt.dev/dev/devruntime"
	"molt.dev/pkg/agentruntime"
)

// A command of a view cannot change the host: its system directories are
// read-only, its processes are out of sight, and what the pod writes into
// its own root or volumes never leads outside them.

// execIn runs script with bash through the protocol at url and returns the
// result, whether or not the command succeeded.
func execIn(t *testing.T, url, script string) agentruntime.Result {
	t.Helper()
	res, err := agentruntime.Exec(context.Background(), agentruntime.ExecRequest{BaseURL: url, Command: []string{"/bin/bash", "-c", script}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Exec %q: %v", script, err)
	}
	return res
}

// serveRoot serves a view of a new pod root and returns its URL.
func serveRoot(t *testing.T, mounts ...devruntime.Mount) string {
	return serve(t, devruntime.Target{View: devruntime.View{Root: filepath.Join(t.TempDir(), "root"), Hostname: "pod", Mounts: mounts}})
}

func TestViewCannotWriteTheHost(t *testing.T) {
	name := "molt-devruntime-test-" + strconv.Itoa(os.Getpid())
	hostFile := filepath.Join("/etc", name)
	if err := os.WriteFile(hostFile, []byte("host\n"), 0o644); err != nil {
		t.Fatalf("create a file of the host: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(hostFile) })
	mustNotExist := []string{"/usr/" + name, "/sys/fs/cgroup/" + name, "/dev/" + name}
	t.Cleanup(func() {
		for _, p := range mustNotExist {
			_ = os.Remove(p)
		}
	})
	url := serveRoot(t)

	const erofs = "Read-only file system"
	for _, tc := range []struct {
		name, script, stderr string
	}{
		{name: "write a file of /etc", script: "echo pod > /etc/" + name, stderr: erofs},
		{name: "remove a file of /etc", script: "rm -f /etc/" + name, stderr: erofs},
		{name: "create a file in /usr", script: "touch /usr/" + name, stderr: erofs},
		{name: "create a file in /sys", script: "touch /sys/" + name, stderr: erofs},
		{name: "create a cgroup (a mount under /sys)", script: "mkdir /sys/fs/cgroup/" + name, stderr: erofs},
		{name: "change a kernel setting", script: "echo 3 > /proc/sys/vm/drop_caches", stderr: erofs},
		{name: "create a file in /dev", script: "touch /dev/" + name, stderr: erofs},
		{name: "remount /etc read-write", script: "mount -o remount,rw,bind /etc || exit 1; echo pod > /etc/" + name},
		{name: "make a device node of the host's disk", script: "mknod /tmp/disk b 8 0", stderr: "Operation not permitted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := execIn(t, url, tc.script)
			if res.Succeeded() || !strings.Contains(res.Stderr, tc.stderr) {
				t.Errorf("%q: exit %d, stderr %q; want a failure with %q", tc.script, res.ExitCode, res.Stderr, tc.stderr)
			}
		})
	}
	if got, err := os.ReadFile(hostFile); err != nil || string(got) != "host\n" {
		t.Errorf("host's %s = %q, %v; want it unchanged", hostFile, got, err)
	}
	for _, p := range mustNotExist {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was created on the host", p)
		}
	}
	// The host's files are there to read and run.
	if res := execIn(t, url, "cat /etc/"+name+"; ls /dev"); res.Stdout != "host\nfd\nfull\nnull\nrandom\nshm\nstderr\nstdin\nstdout\ntty\nurandom\nzero\n" {
		t.Errorf("view reads %q (%s)", res.Stdout, res.FailureMessage())
	}
}

func TestViewHasItsOwnProcesses(t *testing.T) {
	host := exec.Command("sleep", "60")
	if err := host.Start(); err != nil {
		t.Fatalf("start a process of the host: %v", err)
	}
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })
	url := serveRoot(t)

	// The loop's glob is expanded by the shell itself: no other process yet.
	res := execIn(t, url, `echo "pid $$"; for p in /proc/[0-9]*; do echo "proc ${p#/proc/}"; done; `+
		`kill -0 `+strconv.Itoa(host.Process.Pid)+` 2>/dev/null && echo "host process visible"; ps -e -o pid=,comm= | sort -n; true`)
	if want := "pid 1\nproc 1\n"; !strings.HasPrefix(res.Stdout, want) {
		t.Errorf("stdout = %q, want the shell as pid 1 and alone in /proc:\n%s", res.Stdout, want)
	}
	ps := strings.Split(strings.TrimSpace(strings.TrimPrefix(res.Stdout, "pid 1\nproc 1\n")), "\n")
	if len(ps) != 3 || strings.Fields(ps[0])[0] != "1" || strings.Fields(ps[0])[1] != "bash" {
		t.Errorf("ps -e lists %q, want bash (pid 1), ps and sort only (%s)", ps, res.FailureMessage())
	}
	if err := syscall.Kill(host.Process.Pid, 0); err != nil {
		t.Errorf("host's process: %v", err)
	}

	// What a command leaves running ends with it.
	marker := "1" + strconv.Itoa(os.Getpid()) + ".5"
	if res := execIn(t, url, "sleep "+marker+" >/dev/null 2>&1 & echo started"); res.Stdout != "started\n" {
		t.Fatalf("start a background process: %s", res.FailureMessage())
	}
	deadline := time.Now().Add(10 * time.Second)
	for hostHasProcess("sleep\x00" + marker) {
		if time.Now().After(deadline) {
			t.Fatalf("`sleep %s` left behind by a command still runs 10s after it ended", marker)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hostHasProcess reports whether a process of the host has cmdline.
func hostHasProcess(cmdline string) bool {
	all, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range all {
		if b, err := os.ReadFile(p); err == nil && strings.TrimRight(string(b), "\x00") == cmdline {
			return true
		}
	}
	return false
}

// A pod may replace its own directories with symlinks to the host's; the
// next command still builds its view inside the pod's root.
func TestViewFollowsNoSymlinkToTheHost(t *testing.T) {
	hostDir := t.TempDir()
	if err := os.Chmod(hostDir, 0o750); err != nil {
		t.Fatal(err)
	}
	url := serveRoot(t)
	if res := execIn(t, url, "rm -rf /tmp /root && ln -s "+hostDir+" /tmp && ln -s "+hostDir+" /root"); !res.Succeeded() {
		t.Fatalf("replace /tmp and /root with symlinks: %s", res.FailureMessage())
	}
	execIn(t, url, "echo pod > /tmp/f; echo pod > /root/g")
	fi, err := os.Stat(hostDir)
	if err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("host directory %s: %v, %v; want it unchanged (0750)", hostDir, fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(hostDir); len(entries) != 0 {
		t.Errorf("host directory %s has %v; want it empty", hostDir, entries)
	}
}

// A volume's subPath is a directory of the volume, which the pod writes:
// a symlink there is refused rather than followed to the host.
func TestVolumeSubPathFollowsNoSymlink(t *testing.T) {
	hostDir := t.TempDir()
	volume := filepath.Join(t.TempDir(), "volume")
	if err := os.MkdirAll(volume, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostDir, filepath.Join(volume, "link")); err != nil {
		t.Fatal(err)
	}
	url := serveRoot(t,
		devruntime.Mount{Source: volume, SubPath: "link/sub", Target: "/data"},
	)
	res := execIn(t, url, "echo pod > /data/f")
	if res.Succeeded() || !strings.Contains(res.Error, "symlink") {
		t.Errorf("command with a subPath through a symlink: %+v; want it refused", res)
	}
	if entries, _ := os.ReadDir(hostDir); len(entries) != 0 {
		t.Errorf("host directory %s has %v; want it empty", hostDir, entries)
	}
	// A plain subPath is created inside the volume.
	url = serveRoot(t, devruntime.Mount{Source: volume, SubPath: "a/b", Target: "/data"})
	if res := execIn(t, url, "echo pod > /data/f"); !res.Succeeded() {
		t.Fatalf("write to a subPath: %s", res.FailureMessage())
	}
	if got, err := os.ReadFile(filepath.Join(volume, "a/b/f")); err != nil || string(got) != "pod\n" {
		t.Errorf("volume's a/b/f = %q, %v", got, err)
	}
}
