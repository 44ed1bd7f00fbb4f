package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"molt.dev/dev/devcluster"
)

// clockTick is one clock tick of /proc/<pid>/stat: sysconf(_SC_CLK_TCK) is
// 100 on Linux.
const clockTick = 10 * time.Millisecond

// moltServices are molt's five services, by the names of their pid files.
var moltServices = []string{"selector", "patcher", "hookrunner", "podcycler", "statusagg"}

// process is one process of the stack measured by name.
type process struct {
	name string
	pid  int
}

// isMolt says whether a process is one of molt's services or an extra
// replica of one ("patcher-2").
func (p process) isMolt() bool {
	base, _, _ := strings.Cut(p.name, "-")
	return slices.Contains(moltServices, base)
}

// stackProcesses lists the live processes `make up` started.
func stackProcesses(pidDir string) ([]process, error) {
	pids, err := devcluster.ReadPidFiles(pidDir)
	if err != nil {
		return nil, err
	}
	var out []process
	for _, p := range pids {
		if p.Alive() {
			out = append(out, process{name: p.Name, pid: p.Pid})
		}
	}
	return out, nil
}

// cpuTimes reads utime+stime (all threads, not waited-for children) of
// every process.
func cpuTimes(procs []process) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range procs {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid), "stat"))
		if err != nil {
			continue
		}
		// The command name, field 2, is in parentheses and may hold spaces:
		// fields 3 on (state, …, utime 14, stime 15) follow the last ')'.
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		utime, err1 := strconv.ParseInt(f[11], 10, 64)
		stime, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 == nil && err2 == nil {
			out[p.name] = time.Duration(utime+stime) * clockTick
		}
	}
	return out
}

// deltaCPU is after − before for the processes read both times.
func deltaCPU(before, after map[string]time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, a := range after {
		if b, ok := before[name]; ok {
			out[name] = a - b
		}
	}
	return out
}
