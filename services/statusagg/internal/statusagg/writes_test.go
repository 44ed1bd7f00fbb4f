package statusagg

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// An attempt's success waits up to podCatchUp for the pod cache to show the
// pod Ready; nothing else waits for it.
func TestAwaitPod(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	status := func(reason string, ready metav1.ConditionStatus) *agentsv1alpha1.SandboxStatus {
		return &agentsv1alpha1.SandboxStatus{Conditions: []metav1.Condition{
			{Type: agentsv1alpha1.ConditionUpgrading, Reason: reason},
			{Type: agentsv1alpha1.ConditionReady, Status: ready},
		}}
	}
	pending := []metav1.Condition{{Type: agentsv1alpha1.ConditionUpgrading}}
	tests := []struct {
		name    string
		entry   *sandboxEntry
		want    *agentsv1alpha1.SandboxStatus
		waitFor time.Duration
	}{
		{name: "success, pod not Ready yet, just decided",
			entry: &sandboxEntry{pending: pending, urgent: true, pendingSince: now},
			want:  status(agentsv1alpha1.UpgradingReasonSucceeded, metav1.ConditionFalse), waitFor: podCatchUp},
		{name: "success, pod not Ready, 400ms in",
			entry: &sandboxEntry{pending: pending, urgent: true, pendingSince: now.Add(-400 * time.Millisecond)},
			want:  status(agentsv1alpha1.UpgradingReasonSucceeded, metav1.ConditionFalse), waitFor: podCatchUp - 400*time.Millisecond},
		{name: "success, pod still not Ready after podCatchUp: write",
			entry: &sandboxEntry{pending: pending, urgent: true, pendingSince: now.Add(-2 * podCatchUp)},
			want:  status(agentsv1alpha1.UpgradingReasonSucceeded, metav1.ConditionFalse)},
		{name: "success, pod Ready: write",
			entry: &sandboxEntry{pending: pending, urgent: true, pendingSince: now},
			want:  status(agentsv1alpha1.UpgradingReasonSucceeded, metav1.ConditionTrue)},
		{name: "failure: write at once",
			entry: &sandboxEntry{pending: pending, urgent: true, pendingSince: now},
			want:  status(agentsv1alpha1.UpgradingReasonUpgradePodFailed, metav1.ConditionFalse)},
		{name: "nothing pending (a pod change after the success was written)",
			entry: &sandboxEntry{},
			want:  status(agentsv1alpha1.UpgradingReasonSucceeded, metav1.ConditionFalse)},
		{name: "a stage moving on is not the end",
			entry: &sandboxEntry{pending: pending, pendingSince: now},
			want:  status(agentsv1alpha1.UpgradingReasonPostUpgrade, metav1.ConditionFalse)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.entry.awaitPod(tt.want, now); got != tt.waitFor {
				t.Errorf("awaitPod = %s, want %s", got, tt.waitFor)
			}
		})
	}
}

// A pod change is handed to the writer at once only while the sandbox's
// success waits for it.
func TestAwaitsPod(t *testing.T) {
	var w sandboxWrites
	if w.awaitsPod("ns/a") {
		t.Error("awaitsPod of an unknown sandbox = true")
	}
	e := w.lock("ns/a")
	e.addPending([]metav1.Condition{{Type: agentsv1alpha1.ConditionUpgrading}}, newWaiter(transition{}, time.Now()), false, false, time.Now())
	e.mu.Unlock()
	if w.awaitsPod("ns/a") {
		t.Error("awaitsPod with a stage pending = true, want false")
	}
	e = w.lock("ns/a")
	e.addPending([]metav1.Condition{{Type: agentsv1alpha1.ConditionUpgrading}}, newWaiter(transition{}, time.Now()), true, false, time.Now())
	if w.awaitsPod("ns/a") {
		t.Error("awaitsPod while the writer holds the entry = true, want false")
	}
	e.mu.Unlock()
	if !w.awaitsPod("ns/a") {
		t.Error("awaitsPod with an attempt's end pending = false, want true")
	}
}

// A write during a stage is remembered past its entry, for that sandbox only,
// and forgotten by a write outside a stage.
func TestLastStageWrite(t *testing.T) {
	var w sandboxWrites
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	if got := w.lastStageWrite("ns/a", "uid-1"); !got.IsZero() {
		t.Fatalf("lastStageWrite before any write = %s", got)
	}
	w.wrote("ns/a", "uid-1", true, at)
	e := w.lock("ns/a") // the entry is dropped once the informer shows the write
	w.forget("ns/a", e)
	e.mu.Unlock()
	if got := w.lastStageWrite("ns/a", "uid-1"); !got.Equal(at) {
		t.Errorf("lastStageWrite after the entry was dropped = %s, want %s", got, at)
	}
	if got := w.lastStageWrite("ns/a", "uid-2"); !got.IsZero() {
		t.Errorf("lastStageWrite of a sandbox created again under the name = %s, want zero", got)
	}
	w.wrote("ns/a", "uid-1", false, at.Add(time.Second))
	if got := w.lastStageWrite("ns/a", "uid-1"); !got.IsZero() || len(w.inStage) != 0 {
		t.Errorf("after a write outside a stage: lastStageWrite = %s, kept %v", got, w.inStage)
	}
}

// The write of an ops attempt's start tests that the ops still claims the
// sandbox as the start was decided (its label, and its claim annotation when
// it had one); other writes test the sandbox's uid only.
func TestStatusPatchTestsTheClaimOfAStart(t *testing.T) {
	const uid = "sb-uid"
	tests := []struct {
		name  string
		claim *claimRead
		want  string
	}{
		{name: "a stage moving on", want: `[{"op":"test","path":"/metadata/uid","value":"sb-uid"},`},
		{name: "a start, claim annotation read", claim: &claimRead{ops: "up", annotation: "up ops-uid"},
			want: `[{"op":"test","path":"/metadata/uid","value":"sb-uid"},` +
				`{"op":"test","path":"/metadata/labels/agents.kruise.io~1update-ops","value":"up"},` +
				`{"op":"test","path":"/metadata/annotations/molt.dev~1claim","value":"up ops-uid"},`},
		{name: "a start on a sandbox an older molt labelled (no claim annotation)", claim: &claimRead{ops: "up"},
			want: `[{"op":"test","path":"/metadata/uid","value":"sb-uid"},` +
				`{"op":"test","path":"/metadata/labels/agents.kruise.io~1update-ops","value":"up"},`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := statusPatch(uid, agentsv1alpha1.SandboxStatus{}, tt.claim)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(body); !strings.HasPrefix(got, tt.want+`{"op":"add","path":"/status"`) {
				t.Errorf("patch\n%s\nwant it to begin\n%s{\"op\":\"add\",\"path\":\"/status\"...", got, tt.want)
			}
		})
	}
}

// Our last write stands in for the cache until the cache shows it, or anything
// at least as new: a status written over ours since (an old leader's write
// landing late) is decided from, not our write for ever.
func TestCaughtUp(t *testing.T) {
	ours := agentsv1alpha1.SandboxStatus{Phase: agentsv1alpha1.SandboxRunning, Message: "ours"}
	older := agentsv1alpha1.SandboxStatus{Phase: agentsv1alpha1.SandboxRunning, Message: "before ours"}
	at := func(version string, st agentsv1alpha1.SandboxStatus) *agentsv1alpha1.Sandbox {
		return &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{ResourceVersion: version}, Status: st}
	}
	for _, tc := range []struct {
		name    string
		cache   *agentsv1alpha1.Sandbox
		pending bool
		want    bool
	}{
		{"the cache is behind", at("9", older), false, false},
		{"the cache shows our write", at("10", ours), false, true},
		{"the cache shows our write, a transition pending", at("10", ours), true, true},
		{"a later write over ours", at("11", older), false, true},
		{"a later write over ours, a transition pending", at("11", older), true, true},
		{"a version that is not etcd's, the status not ours", at("x", older), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := ours
			e := &sandboxEntry{written: &st, writtenVersion: "10"}
			if tc.pending {
				e.pending = []metav1.Condition{{Type: "Upgrading"}}
			}
			if got := e.caughtUp(tc.cache); got != tc.want {
				t.Errorf("caughtUp = %t, want %t", got, tc.want)
			}
		})
	}
	if (&sandboxEntry{}).caughtUp(at("11", ours)) {
		t.Error("caughtUp with nothing written = true")
	}
}
