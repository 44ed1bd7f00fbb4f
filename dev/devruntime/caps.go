package devruntime

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// keptCapabilities are the capabilities a command of a view keeps: Docker's
// default set without mknod and net_raw (a view has neither a device cgroup
// nor a network namespace of its own). Without the others (sys_admin above
// all) a command cannot remount the view's read-only directories, mount
// anything, load modules, reboot, reach raw devices or trace the host's
// processes.
var keptCapabilities = []int{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_FSETID, unix.CAP_KILL,
	unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_SETPCAP, unix.CAP_NET_BIND_SERVICE,
	unix.CAP_SYS_CHROOT, unix.CAP_AUDIT_WRITE, unix.CAP_SETFCAP,
}

// dropCapabilities limits the calling thread, and what it execs, to
// keptCapabilities: the bounding set (what a program run as root gets) and
// the effective, permitted and inheritable sets.
func dropCapabilities() error {
	var keep [2]uint32
	for _, c := range keptCapabilities {
		keep[c/32] |= 1 << (c % 32)
	}
	for c := 0; c < 64; c++ {
		if keep[c/32]&(1<<(c%32)) != 0 {
			continue
		}
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the last capability this kernel knows
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	for i := range data {
		data[i].Effective &= keep[i]
		data[i].Permitted &= keep[i]
		data[i].Inheritable &= keep[i]
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	return nil
}
