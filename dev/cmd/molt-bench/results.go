package main

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// Issue 12's goals and the reference controller's figures that have no
// shape of their own (the shapes' times are in allShapes).
const (
	goalMoltWrites    = 5.0  // successful writes per sandbox by molt's services
	goalFailedWrites  = 0.05 // failed writes per sandbox by molt's services
	goalMoltCPU       = 15.0 // ms per sandbox, molt's five services together
	goalStackCPU      = 60.0 // ms per sandbox, the whole stack
	goalCPUScale      = 1.2  // 10k run's CPU per sandbox over the 1000 run's
	goalRSSMiB        = 300
	goalReplicaGain   = 2.5 // 1 replica's time over 3 replicas'
	goalPatchRunning  = 2 * time.Second
	goalCompletedLag  = time.Second
	refWrites         = "8.8"
	refFailed         = "0.9"
	refControllerCPU  = "13.4 (controller only)"
	refStackCPU       = "97"
	refAPIServerCPU   = "53"
	refPatchRunning   = "p50 0.66 s / p99 0.93 s"
	perSandboxSources = "100pct,10pct,one"
)

// The results file's sections are written by one function each.
func writeResults(c config, runs []runResult, floor, serial *floorResult, rss map[string]int64) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# molt bench results\n\n%s, %d CPUs, base size n=%d, image-only patch. Written by `make bench` (dev/cmd/molt-bench).\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), c.n)
	for _, r := range runs {
		for name := range r.replicaRSS {
			rss[name] = max(rss[name], r.replicaRSS[name])
		}
	}
	writeGoals(&b, runs, serial, rss)
	writeRuns(&b, runs, floor, serial)
	writeWriteKinds(&b, runs)
	writeCPU(&b, runs)
	writeStages(&b, runs)
	writeRSS(&b, rss)
	if floor != nil {
		fmt.Fprintf(&b, "\n## Floor\n\nThe minimal writes of one upgrade (patch sandbox, delete pod, create pod, 2 status writes) for %d sandboxes, issued directly with client-go at full concurrency: **%s** (%.0f writes/s).\n",
			floor.n, floor.wall.Round(time.Millisecond), float64(floor.writes*floor.n)/floor.wall.Seconds())
	}
	if serial != nil {
		fmt.Fprintf(&b, "\nThe one shape's floor: %d pods replaced one after the other (delete, wait until gone, create the same name, wait until Ready) directly, on the same scheduler, kwok stages and node agent, without molt: **%s** (%s per pod). No controller can upgrade them one at a time faster on this stack.\n",
			serial.n, serial.wall.Round(time.Millisecond), (serial.wall / time.Duration(serial.n)).Round(time.Millisecond))
	}
	return os.WriteFile(c.out, []byte(b.String()), 0o644)
}

// writeGoals is the table of issue 12's goals: each measured figure beside
// its goal and the reference controller's, met or not.
func writeGoals(b *strings.Builder, runs []runResult, serial *floorResult, rss map[string]int64) {
	b.WriteString("## Issue 12's goals\n\n| what | goal | molt | reference controller | verdict |\n| --- | --- | --- | --- | --- |\n")
	row := func(what, goal, measured, ref, verdict string) {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", what, goal, measured, ref, verdict)
	}
	for _, key := range []string{"100pct", "10pct", "one"} {
		s, _ := findShape(allShapes(1000, 0, 0), key)
		what := fmt.Sprintf("%d sandboxes at maxUnavailable %s: apply → Completed", s.goalN, s.maxUnavailable)
		r, ok := findRun(runs, key)
		switch {
		case !ok:
			row(what, "≤ "+secs(s.goalWall), "not run", secs(s.refWall), "—")
		case r.n != s.goalN:
			row(what, "≤ "+secs(s.goalWall), fmt.Sprintf("%s (%d sandboxes)", secs(r.wall), r.n), secs(s.refWall), fmt.Sprintf("n/a: the goal is for %d", s.goalN))
		default:
			measured := fmt.Sprintf("%s (%s)", secs(r.wall), r.phase)
			if key == "one" && serial != nil && serial.n == r.n {
				measured += fmt.Sprintf("; this stack's floor for it %s", secs(serial.wall))
			}
			row(what, "≤ "+secs(s.goalWall), measured, secs(s.refWall), verdict(r.wall <= s.goalWall && r.completed()))
		}
	}
	main := selectRuns(runs, perSandboxSources)
	worst := func(what, goal, ref string, f func(runResult) float64, limit float64) {
		if len(main) == 0 {
			row(what, goal, "not run", ref, "—")
			return
		}
		w := slices.MaxFunc(main, func(a, b runResult) int { return cmp.Compare(f(a), f(b)) })
		v := f(w)
		verdictText := "—"
		if limit > 0 {
			verdictText = verdict(v <= limit)
		}
		row(what, goal, fmt.Sprintf("%.2f (worst: %s)", v, w.shape.key), ref, verdictText)
	}
	worst("successful API writes per sandbox by molt's services", fmt.Sprintf("≤ %g", goalMoltWrites), refWrites,
		func(r runResult) float64 { ok, _ := writeTotals(r.writes, classMolt); return ok / float64(r.n) }, goalMoltWrites)
	worst("failed (non-2xx) API writes per sandbox by molt's services", fmt.Sprintf("≤ %g", goalFailedWrites), refFailed,
		func(r runResult) float64 { _, failed := writeTotals(r.writes, classMolt); return failed / float64(r.n) }, goalFailedWrites)
	worst("CPU ms per sandbox, molt's five services", fmt.Sprintf("≤ %g", goalMoltCPU), refControllerCPU,
		func(r runResult) float64 { return r.cpuPerSandbox(process.isMolt) }, goalMoltCPU)
	worst("CPU ms per sandbox, whole stack", fmt.Sprintf("≤ %g", goalStackCPU), refStackCPU,
		func(r runResult) float64 { return r.cpuPerSandbox(anyProcess) }, goalStackCPU)
	worst("CPU ms per sandbox, kube-apiserver", "—", refAPIServerCPU,
		func(r runResult) float64 {
			return r.cpuPerSandbox(func(p process) bool { return p.name == "kube-apiserver" })
		}, 0)
	if r, ok := findRun(runs, "100pct"); ok {
		d := r.stages[stagePatchToRunning]
		p99 := percentile(d, 0.99)
		row("patch → Running at 100%", "p99 ≤ "+secs(goalPatchRunning), fmt.Sprintf("p50 %s / p99 %s", secs(percentile(d, 0.5)), secs(p99)),
			refPatchRunning, verdict(len(d) > 0 && p99 <= goalPatchRunning))
	} else {
		row("patch → Running at 100%", "p99 ≤ "+secs(goalPatchRunning), "not run", refPatchRunning, "—")
	}
	if len(runs) > 0 {
		w := slices.MaxFunc(runs, func(a, b runResult) int { return cmp.Compare(a.completedLag.Seconds(), b.completedLag.Seconds()) })
		row("Completed after the last sandbox finished", "≤ "+secs(goalCompletedLag), fmt.Sprintf("%s (worst: %s)", secs(w.completedLag), w.shape.key), "—",
			verdict(w.completedLag <= goalCompletedLag))
	}
	writeScaleGoals(row, runs, rss)
	fmt.Fprintf(b, "\nPer-sandbox writes and CPU: the worst of the %s runs (each run's are under Runs). CPU is the delta of utime+stime from ops create to ops finished over the sandboxes; kube-apiserver's includes serving the bench's one watch of the ops. Pod deletes are split by the podcyclers' own count (molt_podcycler_pods_deleted_total): the rest are the local kubelet stand-in's final deletes (molt-devnode), listed under the rest of the stack. Server-side dry runs (the podcycler's check of each new pod before it deletes the old one) store nothing and are listed apart.\n", perSandboxSources)
}

// writeScaleGoals are the goals of the --scale shapes and of memory.
func writeScaleGoals(row func(what, goal, measured, ref, verdict string), runs []runResult, rss map[string]int64) {
	big, okBig := findRun(runs, "10k")
	base, okBase := findRun(runs, "10pct")
	if !okBase {
		base, okBase = findRun(runs, "100pct")
	}
	switch {
	case !okBig:
		row("10k sandboxes (20 ops at once, 10%): CPU per sandbox over the 1000 run's", fmt.Sprintf("≤ %g×", goalCPUScale), "not run (BENCH_SCALE=1)", "—", "—")
	case !okBase:
		row("10k sandboxes: CPU per sandbox over the 1000 run's", fmt.Sprintf("≤ %g×", goalCPUScale), "no 10pct or 100pct run to compare with", "—", "—")
	default:
		molt := big.cpuPerSandbox(process.isMolt) / base.cpuPerSandbox(process.isMolt)
		stack := big.cpuPerSandbox(anyProcess) / base.cpuPerSandbox(anyProcess)
		row(fmt.Sprintf("%d sandboxes (20 ops at once, 10%%): molt's CPU per sandbox over the %s run's", big.n, base.shape.key), fmt.Sprintf("≤ %g×", goalCPUScale),
			fmt.Sprintf("%.2f× (%.1f ms; whole stack %.2f×), %s in %s", molt, big.cpuPerSandbox(process.isMolt), stack, big.phase, secs(big.wall)), "—",
			verdict(molt <= goalCPUScale && big.completed()))
	}
	var peak int64
	var peakName string
	for name, kb := range rss {
		if (process{name: name}).isMolt() && kb > peak {
			peak, peakName = kb, name
		}
	}
	if peakName != "" {
		row("peak RSS of every service (VmHWM)", fmt.Sprintf("< %d MiB", goalRSSMiB), fmt.Sprintf("%.0f MiB (largest: %s)", mib(peak), peakName), "—", verdict(mib(peak) < goalRSSMiB))
	}
	one, ok1 := findRun(runs, "replicas-1")
	three, ok3 := findRun(runs, "replicas-3")
	if ok1 && ok3 {
		gain := one.wall.Seconds() / three.wall.Seconds()
		row(fmt.Sprintf("%d sandboxes with 1s hooks: 3 replicas' speed-up over 1", three.n), fmt.Sprintf("≥ %g×", goalReplicaGain),
			fmt.Sprintf("%.2f× (%s vs %s)", gain, secs(one.wall), secs(three.wall)), "—", verdict(gain >= goalReplicaGain))
	} else {
		row("500 sandboxes with 1s hooks: 3 replicas' speed-up over 1", fmt.Sprintf("≥ %g×", goalReplicaGain), "not run (BENCH_SCALE=1)", "—", "—")
	}
}

func writeRuns(b *strings.Builder, runs []runResult, floor, serial *floorResult) {
	b.WriteString("\n## Runs\n\nPer sandbox: API writes (molt's successful / failed, events and leases, rest of stack) and CPU ms (molt's five services, whole stack).\n\n")
	b.WriteString("| run | shape | sandboxes | maxUnavailable | result | apply → Completed | goal | ratio to floor | molt writes ok / failed | events+leases | rest | CPU molt | CPU stack | Completed lag | events/s |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range runs {
		goal := "—"
		if r.shape.goalWall > 0 && r.n == r.shape.goalN {
			goal = "≤ " + secs(r.shape.goalWall)
		}
		ratio := "—"
		switch {
		case r.shape.key == "one" && serial != nil && r.n == serial.n:
			ratio = fmt.Sprintf("%.2f× (serial)", r.wall.Seconds()/serial.wall.Seconds())
		case floor != nil && r.n == floor.n && r.shape.namespaces == 1 && r.shape.hookSeconds == 0:
			ratio = fmt.Sprintf("%.2f×", r.wall.Seconds()/floor.wall.Seconds())
		}
		ok, failed := writeTotals(r.writes, classMolt)
		aside, asideFailed := writeTotals(r.writes, classAside)
		rest, restFailed := writeTotals(r.writes, classRest)
		n := float64(r.n)
		fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %s | %.2f / %.3f | %.2f | %.2f | %.1f | %.1f | %s | %.0f |\n",
			r.shape.key, r.shape.title, r.n, r.shape.maxUnavailable, r.phase, secs(r.wall), goal, ratio,
			ok/n, failed/n, (aside+asideFailed)/n, (rest+restFailed)/n,
			r.cpuPerSandbox(process.isMolt), r.cpuPerSandbox(anyProcess), secs(r.completedLag), float64(r.events)/r.wall.Seconds())
	}
	fmt.Fprintf(b, "\nCompleted lag: from the namespace's last posthook-done event to the bench seeing the ops Completed (it watches the ops).\n")
}

// writeWriteKinds is every kind of write of the runs' upgrades, per sandbox,
// one column per run, then molt's writes while the runs' sandboxes were
// created.
func writeWriteKinds(b *strings.Builder, runs []runResult) {
	b.WriteString("\n## API writes per sandbox, by verb, resource and code\n\nFrom kube-apiserver's `apiserver_request_total`, the delta from ops create to ops finished; the bench's own ops creates are taken out.\n\n")
	writeKindsTable(b, runs, func(r runResult) map[requestKey]float64 { return r.writes }, nil)
	b.WriteString("\n## Creating the sandboxes: molt's API writes per sandbox\n\nThe same delta from the run's first namespace create to every sandbox Running, before the ops (earlier runs' namespaces gone first); the bench's own namespace and sandbox creates are taken out. Molt's services give each new sandbox its pod (podcycler: the runtime access token on the sandbox, then the pod) and its status (statusagg). A create refused as AlreadyExists (POST pods 409) is a second create of a pod whose first the pod cache did not show yet.\n\n")
	writeKindsTable(b, runs, func(r runResult) map[requestKey]float64 { return r.setupWrites }, []string{classMolt})
}

// writeKindsTable writes one row per kind of write in the runs' get (only of
// classes, if given), one column per run, per sandbox.
func writeKindsTable(b *strings.Builder, runs []runResult, get func(runResult) map[requestKey]float64, classes []string) {
	kinds := map[requestKey]bool{}
	for _, r := range runs {
		for k, v := range get(r) {
			if v != 0 && (classes == nil || slices.Contains(classes, classify(k))) {
				kinds[k] = true
			}
		}
	}
	keys := make([]requestKey, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	order := map[string]int{classMolt: 0, classAside: 1, classRest: 2, classDryRun: 3}
	sort.Slice(keys, func(i, j int) bool {
		if ci, cj := order[classify(keys[i])], order[classify(keys[j])]; ci != cj {
			return ci < cj
		}
		return keys[i].String() < keys[j].String()
	})
	b.WriteString("| whose | write |")
	for _, r := range runs {
		b.WriteString(" " + r.shape.key + " |")
	}
	b.WriteString("\n| --- | --- |" + strings.Repeat(" --- |", len(runs)) + "\n")
	for _, k := range keys {
		fmt.Fprintf(b, "| %s | %s |", classify(k), k)
		for _, r := range runs {
			fmt.Fprintf(b, " %.3f |", get(r)[k]/float64(r.n))
		}
		b.WriteString("\n")
	}
}

// writeCPU is CPU ms per sandbox of every process, one column per run.
func writeCPU(b *strings.Builder, runs []runResult) {
	names := map[string]bool{}
	for _, r := range runs {
		for name := range r.cpu {
			names[name] = true
		}
	}
	b.WriteString("\n## CPU ms per sandbox, by process\n\nutime+stime from /proc/<pid>/stat, the delta from ops create to ops finished, over the run's sandboxes.\n\n| process |")
	for _, r := range runs {
		b.WriteString(" " + r.shape.key + " |")
	}
	b.WriteString("\n| --- |" + strings.Repeat(" --- |", len(runs)) + "\n")
	line := func(label string, keep func(process) bool, ran func(runResult) bool) {
		b.WriteString("| " + label + " |")
		for _, r := range runs {
			if !ran(r) {
				b.WriteString(" — |")
				continue
			}
			fmt.Fprintf(b, " %.2f |", r.cpuPerSandbox(keep))
		}
		b.WriteString("\n")
	}
	for _, name := range sortedKeys(names) {
		line(name, func(p process) bool { return p.name == name }, func(r runResult) bool { _, ok := r.cpu[name]; return ok })
	}
	always := func(runResult) bool { return true }
	line("**molt's five services**", process.isMolt, always)
	line("**whole stack**", anyProcess, always)
}

func writeStages(b *strings.Builder, runs []runResult) {
	for _, r := range runs {
		fmt.Fprintf(b, "\n## Stage latency, %s (%s)\n\n| stage | n | p50 | p90 | p99 | max |\n| --- | --- | --- | --- | --- | --- |\n", r.shape.key, r.shape.title)
		for _, s := range stages {
			d := r.stages[s.name]
			fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s |\n", s.name, len(d), percentile(d, 0.5).Round(time.Millisecond),
				percentile(d, 0.9).Round(time.Millisecond), percentile(d, 0.99).Round(time.Millisecond), percentile(d, 1).Round(time.Millisecond))
		}
	}
}

func writeRSS(b *strings.Builder, rss map[string]int64) {
	fmt.Fprintf(b, "\n## Peak RSS (VmHWM) per process\n\nOver each process's life, read after the last run (extra replicas: before they stopped). Goal for molt's services: < %d MiB.\n\n| process | peak RSS |\n| --- | --- |\n", goalRSSMiB)
	for _, name := range sortedKeys(rss) {
		fmt.Fprintf(b, "| %s | %.1f MiB |\n", name, mib(rss[name]))
	}
}

// cpuPerSandbox is the CPU ms per sandbox of the processes keep selects.
func (r runResult) cpuPerSandbox(keep func(process) bool) float64 {
	var sum time.Duration
	for name, d := range r.cpu {
		if keep(process{name: name}) {
			sum += d
		}
	}
	return sum.Seconds() * 1000 / float64(r.n)
}

func anyProcess(process) bool { return true }

func (r runResult) completed() bool { return r.phase == "Completed" }

func findShape(shapes []shape, key string) (shape, bool) {
	i := slices.IndexFunc(shapes, func(s shape) bool { return s.key == key })
	if i < 0 {
		return shape{}, false
	}
	return shapes[i], true
}

func findRun(runs []runResult, key string) (runResult, bool) {
	i := slices.IndexFunc(runs, func(r runResult) bool { return r.shape.key == key })
	if i < 0 {
		return runResult{}, false
	}
	return runs[i], true
}

func selectRuns(runs []runResult, keys string) []runResult {
	var out []runResult
	for _, r := range runs {
		if slices.Contains(strings.Split(keys, ","), r.shape.key) {
			out = append(out, r)
		}
	}
	return out
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func mib(kb int64) float64 { return float64(kb) / 1024 }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
