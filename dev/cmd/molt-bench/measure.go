package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
)

// natsLogin logs the bench in to NATS as the read-only user viewer.
var natsLogin nats.Option = func(*nats.Options) error { return nil }

func streamMessages(ctx context.Context, url string) (uint64, error) {
	nc, err := nats.Connect(url, natsLogin)
	if err != nil {
		return 0, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		return 0, fmt.Errorf("open stream %s: %w", events.StreamName, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info %s: %w", events.StreamName, err)
	}
	return info.State.Msgs, nil
}

// history is what a namespace's events say about its upgrade.
type history struct {
	// stages is, per stage, how long each sandbox spent in it.
	stages map[string][]time.Duration
	// last is the time of the last posthook-done, or of the last event if
	// there is none.
	last time.Time
}

// stages are the spans the results report, each from one event type to
// another of the same sandbox.
var stages = []struct{ name, from, to string }{
	{"patch (requested→patched)", events.TypeRequested, events.TypePatched},
	{"preUpgrade (patched→prehook-done)", events.TypePatched, events.TypePreHookDone},
	{stageBackupToDelete, events.TypePreHookDone, upgradePodStarted},
	{"upgradePod (prehook-done→pod-ready)", events.TypePreHookDone, events.TypePodReady},
	{"postUpgrade (pod-ready→posthook-done)", events.TypePodReady, events.TypePostHookDone},
	{stagePatchToRunning, events.TypePatched, events.TypePodReady},
	{"whole sandbox (requested→posthook-done)", events.TypeRequested, events.TypePostHookDone},
}

// stagePatchToRunning is the span issue 12 sets a goal for.
const stagePatchToRunning = "patch → Running (patched→pod-ready)"

// stageBackupToDelete is how old preUpgrade's backup is when podcycler
// starts UpgradePod and deletes the old pod: what the sandbox writes in it is
// not restored.
const stageBackupToDelete = "backup → old pod deleted (prehook-done→UpgradePod started)"

// upgradePodStarted keys the stage-started event of UpgradePod in a
// sandbox's event times (stage-started is one type for every stage).
const upgradePodStarted = events.TypeStageStarted + "/" + agentsv1alpha1.UpgradingReasonUpgradePod

// readHistory reads every event of the namespace from the stream.
func readHistory(ctx context.Context, url, ns string) (history, error) {
	var h history
	nc, err := nats.Connect(url, natsLogin)
	if err != nil {
		return h, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return h, err
	}
	cons, err := js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.SubjectPrefix + "." + events.EncodeToken(ns) + ".>"}})
	if err != nil {
		return h, fmt.Errorf("read history of %s: %w", ns, err)
	}
	times := map[string]map[string]time.Time{}
	var lastEvent, lastDone time.Time
	for {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			return h, fmt.Errorf("read history of %s: %w", ns, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			ev, err := events.Decode(msg.Data())
			if err != nil {
				continue
			}
			key := ev.SandboxKey()
			if times[key] == nil {
				times[key] = map[string]time.Time{}
			}
			typ := ev.Type
			if typ == events.TypeStageStarted {
				typ += "/" + ev.Data.Stage
			}
			if _, seen := times[key][typ]; !seen {
				times[key][typ] = ev.Time
			}
			if ev.Time.After(lastEvent) {
				lastEvent = ev.Time
			}
			if ev.Type == events.TypePostHookDone && ev.Time.After(lastDone) {
				lastDone = ev.Time
			}
		}
		if n == 0 {
			break
		}
	}
	h.stages = map[string][]time.Duration{}
	for _, ts := range times {
		for _, s := range stages {
			from, ok1 := ts[s.from]
			to, ok2 := ts[s.to]
			if ok1 && ok2 {
				h.stages[s.name] = append(h.stages[s.name], to.Sub(from))
			}
		}
	}
	h.last = lastDone
	if h.last.IsZero() {
		h.last = lastEvent
	}
	return h, nil
}

// peakRSS reads VmHWM, in kB, of every process the local stack started.
func peakRSS(pidDir string) map[string]int64 {
	out := map[string]int64{}
	procs, err := stackProcesses(pidDir)
	if err != nil {
		return out
	}
	for _, p := range procs {
		if kb, ok := vmHWM(p.pid); ok {
			out[p.name] = kb
		}
	}
	return out
}

// vmHWM is the peak resident set of pid in kB, from /proc/<pid>/status.
func vmHWM(pid int) (int64, bool) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb, err == nil
		}
	}
	return 0, false
}
