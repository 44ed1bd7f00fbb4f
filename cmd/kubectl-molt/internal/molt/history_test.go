package molt

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
)

// TestHistoryGolden: two attempts, the first failed in preUpgrade, the
// second resuming it and succeeding: events in order, stages, durations,
// pods, the hook's output.
func TestHistoryGolden(t *testing.T) {
	sb := events.SandboxRef{Namespace: "default", Name: "box-0", UID: "s1"}
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	exit := func(c int32) *int32 { return &c }
	ev := func(typ string, s float64, d events.Data) events.Event {
		d.Sandbox = sb
		if d.Ops.Name == "" {
			d.Ops, d.Attempt = events.OpsRef{Name: "up", UID: "u1"}, "u1"
		}
		return events.Event{Type: typ, Time: at(s), Data: d}
	}
	second := events.Data{Ops: events.OpsRef{Name: "up-retry", UID: "u2"}, Attempt: "u2", ResumedAttempt: "u1", ResumedReason: "PreUpgradeFailed"}
	third := events.Data{Ops: events.OpsRef{Name: "up-retry-2", UID: "u3"}, Attempt: "u3", ResumedAttempt: "u2", ResumedReason: "PostUpgradeFailed"}
	fourth := events.Data{Ops: events.OpsRef{Name: "up-2", UID: "u4"}, Attempt: "u4"}
	fifth := events.Data{Ops: events.OpsRef{Name: "up-3", UID: "u5"}, Attempt: "u5"}
	with := func(d events.Data, f func(*events.Data)) events.Data { f(&d); return d }
	list := []events.Event{
		ev(events.TypeRequested, 0, events.Data{}),
		ev(events.TypePatched, 0.5, events.Data{TargetRevision: "abc", OldPodUID: "p1"}),
		ev(events.TypeStageStarted, 0.52, events.Data{Stage: "PreUpgrade"}),
		// A call error (a timeout) shows its cause before the output.
		ev(events.TypeFailed, 1.5, events.Data{Stage: "PreUpgrade", Reason: "PreUpgradeFailed",
			Message: "hook execution error: timed out after 60 seconds, stderr: tar: /backup: slow disk, stdout: archiving"}),
		ev(events.TypeRequested, 60, second),
		ev(events.TypePatched, 60.4, with(second, func(d *events.Data) { d.TargetRevision, d.OldPodUID = "abc", "p1" })),
		ev(events.TypeStageStarted, 60.41, with(second, func(d *events.Data) { d.Stage = "PreUpgrade" })),
		ev(events.TypePreHookDone, 61.4, with(second, func(d *events.Data) { d.OldPodUID, d.HookExitCode = "p1", exit(0) })),
		ev(events.TypeStageStarted, 61.42, with(second, func(d *events.Data) { d.Stage = "UpgradePod" })),
		ev(events.TypePodReady, 62.2, with(second, func(d *events.Data) { d.NewPodUID = "p2" })),
		ev(events.TypeStageStarted, 62.21, with(second, func(d *events.Data) { d.Stage = "PostUpgrade" })),
		ev(events.TypeFailed, 63, with(second, func(d *events.Data) {
			d.Stage, d.Reason, d.HookExitCode, d.Message = "PostUpgrade", "PostUpgradeFailed", exit(1), "hook failed with exit code 1, stderr: restore interrupted, stdout: "
		})),
		// Resumed at PostUpgrade: the patcher hands over with a pod-ready
		// (UpgradePod skipped), and no PreUpgrade or UpgradePod is shown.
		ev(events.TypeRequested, 120, third),
		ev(events.TypePodReady, 120.3, with(third, func(d *events.Data) { d.Stage, d.NewPodUID = "UpgradePod", "p2" })),
		ev(events.TypeStageStarted, 120.31, with(third, func(d *events.Data) { d.Stage = "PostUpgrade" })),
		ev(events.TypePostHookDone, 121, with(third, func(d *events.Data) { d.NewPodUID, d.HookExitCode = "p2", exit(0) })),
		// NATS down mid-hook: the watchdog re-drives and fails the stage;
		// the hook's prehook-done, sent before the failure, is stored after it.
		ev(events.TypeRequested, 200, fourth),
		ev(events.TypePatched, 200.5, with(fourth, func(d *events.Data) { d.TargetRevision, d.OldPodUID = "def", "p2" })),
		ev(events.TypeStageStarted, 200.6, with(fourth, func(d *events.Data) { d.Stage = "PreUpgrade" })),
		ev(events.TypeRequested, 226, with(fourth, func(d *events.Data) { d.Redrive = 1 })),
		ev(events.TypeFailed, 306, with(fourth, func(d *events.Data) {
			d.Stage, d.Reason, d.Message = "PreUpgrade", "PreUpgradeFailed", "no progress in PreUpgrade for 1m46s"
		})),
		ev(events.TypePreHookDone, 206, with(fourth, func(d *events.Data) { d.OldPodUID, d.HookExitCode = "p2", exit(0) })),
		// No pod when the upgrade began: preUpgrade skipped, with a note.
		ev(events.TypeRequested, 400, fifth),
		ev(events.TypePatched, 400.5, with(fifth, func(d *events.Data) { d.TargetRevision = "def" })),
		ev(events.TypePreHookDone, 400.6, with(fifth, func(d *events.Data) {
			d.Message = "preUpgrade was not run: the sandbox had no pod when this upgrade began (it was deleted, or never created), so nothing was backed up"
		})),
		ev(events.TypeStageStarted, 400.61, with(fifth, func(d *events.Data) { d.Stage = "UpgradePod" })),
		ev(events.TypePodReady, 402, with(fifth, func(d *events.Data) { d.NewPodUID = "p3" })),
		ev(events.TypePostHookDone, 403, with(fifth, func(d *events.Data) { d.NewPodUID, d.HookExitCode = "p3", exit(0) })),
	}
	var out bytes.Buffer
	h := &historyPrinter{out: &out, loc: time.UTC}
	for _, e := range list {
		h.add(e)
	}
	h.flush(true)
	got := out.String()
	path := filepath.Join("testdata", "history.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./internal/molt -update` to write it)", err)
	}
	if got != string(want) {
		t.Errorf("history differs:\n--- got\n%s\n--- want\n%s", got, want)
	}
}

// An attempt of an earlier sandbox of the same name (the stream keeps its events) is
// marked as such, and the current sandbox's are not.
func TestHistoryMarksAnEarlierSandboxOfTheName(t *testing.T) {
	var out bytes.Buffer
	h := &historyPrinter{out: &out, loc: time.UTC, current: "s2"}
	for _, uid := range []types.UID{"s1", "s2"} {
		h.add(events.Event{Type: events.TypeRequested, Time: t0, Data: events.Data{
			Sandbox: events.SandboxRef{Namespace: "default", Name: "box-0", UID: uid}, Ops: events.OpsRef{Name: "up-" + string(uid)}, Attempt: "a-" + string(uid)}})
	}
	h.flush(true)
	got := out.String()
	if !strings.Contains(got, "Attempt a-s1 (ops up-s1), of an earlier sandbox of this name (uid s1), deleted since") {
		t.Errorf("the earlier sandbox's attempt is not marked:\n%s", got)
	}
	if strings.Contains(got, "uid s2") {
		t.Errorf("the current sandbox's attempt is marked:\n%s", got)
	}
}

// A sandbox deleted and created again under its name while an ops upgraded it
// shares the ops's attempt id with the deleted one: its events are printed as
// an attempt of its own, not as late events of the deleted sandbox's ended one.
func TestHistorySplitsAnAttemptOfTwoSandboxesOfTheName(t *testing.T) {
	var out bytes.Buffer
	h := &historyPrinter{out: &out, loc: time.UTC, current: "s2"}
	ref := func(uid types.UID) events.SandboxRef {
		return events.SandboxRef{Namespace: "default", Name: "box-0", UID: uid}
	}
	ops := events.OpsRef{Name: "up", UID: "a1"}
	h.add(events.Event{Type: events.TypeRequested, Time: t0, Data: events.Data{Sandbox: ref("s1"), Ops: ops, Attempt: "a1"}})
	h.add(events.Event{Type: events.TypeFailed, Time: t0.Add(time.Second), Data: events.Data{Sandbox: ref("s1"), Ops: ops, Attempt: "a1",
		Stage: agentsv1alpha1.UpgradingReasonPreUpgrade, Reason: agentsv1alpha1.UpgradingReasonPreUpgradeFailed, Message: "pod gone"}})
	h.add(events.Event{Type: events.TypeRequested, Time: t0.Add(2 * time.Second), Data: events.Data{Sandbox: ref("s2"), Ops: ops, Attempt: "a1"}})
	h.flush(true)
	got := out.String()
	if n := strings.Count(got, "Attempt a1 (ops up)"); n != 2 {
		t.Errorf("%d attempt headers, want 2 (one per sandbox):\n%s", n, got)
	}
	if strings.Contains(got, "changes nothing") {
		t.Errorf("the new sandbox's events are printed as late events of the deleted one's attempt:\n%s", got)
	}
}

// The UpgradePod row names the revision the new pod is built from: a direct
// attempt whose template was edited again before its pod was replaced builds
// that edit, not the revision it was patched to.
func TestHistoryNamesTheRevisionUpgradePodBuilds(t *testing.T) {
	got := detail(events.Event{Type: events.TypeStageStarted, Data: events.Data{Stage: agentsv1alpha1.UpgradingReasonUpgradePod, TargetRevision: "def"}})
	if got != "builds revision def" {
		t.Errorf("detail = %q, want %q", got, "builds revision def")
	}
	if got := detail(events.Event{Type: events.TypeStageStarted, Data: events.Data{Stage: agentsv1alpha1.UpgradingReasonPreUpgrade, TargetRevision: "def"}}); got != "" {
		t.Errorf("detail of PreUpgrade's start = %q, want none", got)
	}
}

// A hook's stage started again (the hookrunner took its input again) says
// when the first run began, and that it is followed or run again: a walk saw
// a preUpgrade run twice after an API server restart and one row of it.
func TestHistoryTellsAHookDeliveredAgain(t *testing.T) {
	first := t0.Add(-40 * time.Second)
	got := detail(events.Event{Type: events.TypeStageStarted, Data: events.Data{Stage: agentsv1alpha1.UpgradingReasonPreUpgrade, HookStartedAt: &first}})
	want := "hook delivered again: its run begun at " + first.UTC().Format(time.RFC3339) + " is followed if the sandbox's agent-runtime still has it, else the hook runs again"
	if got != want {
		t.Errorf("detail = %q, want %q", got, want)
	}
}

// A paused sandbox's attempt spends its first moments waking the sandbox:
// the stage summary calls that time Resuming, not PreUpgrade (a walk saw
// "PreUpgrade 521ms, ResumeSucceed 11ms, PreUpgrade 3.062s").
func TestHistoryCallsAWakeUpResuming(t *testing.T) {
	var out bytes.Buffer
	h := &historyPrinter{out: &out, loc: time.UTC, current: "s1"}
	d := events.Data{Sandbox: events.SandboxRef{Namespace: "default", Name: "box-0", UID: "s1"}, Ops: events.OpsRef{Name: "up", UID: "a1"}, Attempt: "a1"}
	at := func(typ, stage string, ms int) events.Event {
		e := events.Event{Type: typ, Time: t0.Add(time.Duration(ms) * time.Millisecond), Data: d}
		e.Data.Stage = stage
		return e
	}
	for _, ev := range []events.Event{
		at(events.TypeRequested, "", 0),
		at(events.TypeStageStarted, agentsv1alpha1.UpgradingReasonResumeSucceed, 500),
		at(events.TypePatched, "", 510),
		at(events.TypePreHookDone, agentsv1alpha1.UpgradingReasonPreUpgrade, 1500),
	} {
		h.add(ev)
	}
	h.flush(true)
	if got := out.String(); !strings.Contains(got, "stages: Resuming 500ms, ResumeSucceed 10ms, PreUpgrade") {
		t.Errorf("stage summary does not call the wake-up Resuming:\n%s", got)
	}
}

// The title comes with the first event: a name with no history prints
// nothing before its one line (or its error, for a typo).
func TestHistoryTitleWithTheFirstEvent(t *testing.T) {
	var out bytes.Buffer
	h := &historyPrinter{out: &out, loc: time.UTC, title: "History of sandbox ns/a (stream S)\n"}
	h.flush(true)
	if out.Len() != 0 {
		t.Fatalf("printed %q before any event", out.String())
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := events.Data{Attempt: "a1", Ops: events.OpsRef{Name: "up"}}
	h.add(events.Event{Type: events.TypeRequested, Time: at, Data: d})
	h.add(events.Event{Type: events.TypePatched, Time: at.Add(time.Second), Data: d})
	h.flush(true)
	if got := out.String(); !strings.HasPrefix(got, "History of sandbox ns/a (stream S)\n\nAttempt a1 (ops up)") || strings.Count(got, "History of") != 1 {
		t.Errorf("history = %q, want the title once, first", got)
	}
}
