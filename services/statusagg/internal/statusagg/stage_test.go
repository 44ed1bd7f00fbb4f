package statusagg

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

func event(typ, attempt, opsName string) events.Event {
	return events.Event{Type: typ, Data: events.Data{Attempt: attempt, Ops: events.OpsRef{Name: opsName}}}
}

// checkpointing is ev as the patcher marks an attempt that checkpoints.
func checkpointing(ev events.Event) events.Event {
	ev.Data.Checkpoint = true
	return ev
}

func TestStageOf(t *testing.T) {
	recreate := &agentsv1alpha1.Sandbox{}
	woken := func(paused bool) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "ops"},
			Annotations: map[string]string{agentsv1alpha1.AnnotationUpgradeResumeTrigger: "true"}}}
		sb.Spec.Paused = paused
		return sb
	}
	// The patcher marks a CheckpointRestore attempt of an ops on the sandbox;
	// a direct upgrade follows the sandbox's own upgradePolicy.
	checkpoint := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{upgrade.AnnotationUpgradeStrategy: upgrade.StrategyValue("a")}}}
	directCheckpoint := &agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{
		UpgradePolicy: &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeCheckpointRestore}}}
	started := func(stage string) events.Event {
		ev := event(events.TypeStageStarted, "a", "ops")
		ev.Data.Stage = stage
		return ev
	}
	failed := func(reason string) events.Event {
		ev := event(events.TypeFailed, "a", "ops")
		ev.Data.Stage, ev.Data.Reason = "UpgradePod", reason
		return ev
	}
	for _, tc := range []struct {
		name    string
		ev      events.Event
		sb      *agentsv1alpha1.Sandbox
		want    string
		wantErr bool
	}{
		{"requested begins at PreUpgrade", event(events.TypeRequested, "a", "ops"), recreate, "PreUpgrade", false},
		{"requested of a paused sandbox admitted to be woken begins at Resuming", event(events.TypeRequested, "a", "ops"), woken(true), "Resuming", false},
		{"so does one its user unpaused since: its pod comes back first", event(events.TypeRequested, "a", "ops"), woken(false), "Resuming", false},
		{"patched is PreUpgrade", event(events.TypePatched, "a", "ops"), recreate, "PreUpgrade", false},
		{"prehook-done leads to UpgradePod", event(events.TypePreHookDone, "a", "ops"), recreate, "UpgradePod", false},
		{"prehook-done leads to Checkpointing under CheckpointRestore", event(events.TypePreHookDone, "a", "ops"), checkpoint, "Checkpointing", false},
		{"another attempt's CheckpointRestore mark does not count", event(events.TypePreHookDone, "b", "ops"), checkpoint, "UpgradePod", false},
		{"a policy without the mark is not an ops's strategy", event(events.TypePreHookDone, "a", "ops"), directCheckpoint, "UpgradePod", false},
		{"the patcher's word that the attempt checkpoints counts over a copy without the mark", checkpointing(event(events.TypePreHookDone, "a", "ops")), recreate, "Checkpointing", false},
		{"a direct upgrade follows the sandbox's policy", event(events.TypePreHookDone, upgrade.DirectAttemptPrefix+"r-1", ""), directCheckpoint, "Checkpointing", false},
		{"pod-ready leads to PostUpgrade", event(events.TypePodReady, "a", "ops"), recreate, "PostUpgrade", false},
		{"posthook-done is Succeeded", event(events.TypePostHookDone, "a", "ops"), recreate, "Succeeded", false},
		{"stage-started names its stage", started("Checkpointing"), recreate, "Checkpointing", false},
		{"stage-started with an unknown stage", started("Nap"), recreate, "", true},
		{"stage-started cannot claim success", started("Succeeded"), recreate, "", true},
		{"failed carries its reason", failed("UpgradePodFailed"), recreate, "UpgradePodFailed", false},
		{"failed with an unknown reason", failed("Oops"), recreate, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := stageOf(tc.ev, tc.sb)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("stageOf = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// A failure's Event says what to do next: a direct upgrade's how a direct
// upgrade is retried, an ops's how that ops is retried; a stage's words
// that already name a next step are left as written.
func TestFailureEventMessageSaysWhatToDoNext(t *testing.T) {
	msg := "hook failed with exit code 1, stderr: no space, stdout: "
	direct := failureEventMessage(&agentsv1alpha1.Sandbox{}, transition{Attempt: "direct-r5-5", To: "PreUpgradeFailed", Message: msg})
	if direct != msg+"; "+directNextStep {
		t.Errorf("direct failure Event message = %q", direct)
	}
	claimed := &agentsv1alpha1.Sandbox{}
	claimed.Namespace = "team-a"
	claimed.Labels = map[string]string{agentsv1alpha1.LabelUpdateOps: "up"}
	got := failureEventMessage(claimed, transition{Attempt: "uid-1", To: "PreUpgradeFailed", Message: msg})
	if !strings.HasPrefix(got, msg+"; ") || !strings.Contains(got, "`kubectl molt retry up -n team-a`") {
		t.Errorf("ops failure Event message = %q, want the failure, then the ops's retry", got)
	}
	long := strings.Repeat("x", 2000)
	if got := failureEventMessage(claimed, transition{Attempt: "uid-1", To: "PreUpgradeFailed", Message: long}); len(got) > agentsv1alpha1.MaxConditionMessageLength || !strings.Contains(got, "kubectl molt retry up") {
		t.Errorf("a long failure's message (%d bytes) must keep its next step within the cap", len(got))
	}
	stated := "the new pod of sandbox s has an image the kubelet cannot pull: x; fix the patch, then create a new SandboxUpdateOps to resume"
	if got := failureEventMessage(claimed, transition{Attempt: "uid-1", To: "UpgradePodFailed", Message: stated}); got != stated {
		t.Errorf("a failure that names its next step got another: %q", got)
	}
	rebuilt := "pod ns/box was built from the new template after this direct upgrade was requested: ...; then change spec.template again to clear this failure"
	if got := failureEventMessage(&agentsv1alpha1.Sandbox{}, transition{Attempt: "direct-r5-5", To: "PreUpgradeFailed", Message: rebuilt}); got != rebuilt {
		t.Errorf("a direct failure that names its next step got another: %q", got)
	}
	if got := failureEventMessage(&agentsv1alpha1.Sandbox{}, transition{Attempt: "uid-1", To: "PreUpgradeFailed", Message: msg}); got != msg {
		t.Errorf("a failure no ops claims any more got an ops's next step: %q", got)
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		curAttempt, curReason string
		ev                    events.Event
		target                string
		wantSkip              bool
		wantNew               bool
	}{
		{"requested begins a first attempt", "", "", event(events.TypeRequested, "a", "ops"), "PreUpgrade", false, true},
		{"requested of a new attempt starts over", "old", "UpgradePodFailed", event(events.TypeRequested, "a", "ops"), "PreUpgrade", false, true},
		{"a late requested adopts the ops' attempt", "old", "Succeeded", event(events.TypePatched, "a", "ops"), "PreUpgrade", false, true},
		{"a direct upgrade's stray event of another attempt is stale", "direct-2", "UpgradePod", event(events.TypePodReady, "direct-1", ""), "PostUpgrade", true, false},
		{"a late requested of a superseded direct attempt does not start it again", "direct-r6-6", "PreUpgrade", event(events.TypeRequested, "direct-r5-5", ""), "PreUpgrade", true, false},
		{"requested of the next direct attempt starts it", "direct-r5-5", "UpgradePodFailed", event(events.TypeRequested, "direct-r6-6", ""), "PreUpgrade", false, true},
		{"forward within the attempt", "a", "PreUpgrade", event(events.TypePreHookDone, "a", "ops"), "UpgradePod", false, false},
		{"same stage again changes nothing", "a", "PreUpgrade", event(events.TypePatched, "a", "ops"), "PreUpgrade", true, false},
		{"redelivered earlier event does not move back", "a", "PostUpgrade", event(events.TypePreHookDone, "a", "ops"), "UpgradePod", true, false},
		{"redelivered requested of the same attempt", "a", "UpgradePod", event(events.TypeRequested, "a", "ops"), "PreUpgrade", true, false},
		{"failure ends the attempt from any stage", "a", "PreUpgrade", event(events.TypeFailed, "a", "ops"), "UpgradePodFailed", false, false},
		{"a PreUpgrade failure after a later stage started is a stale duplicate's", "a", "UpgradePod", event(events.TypeFailed, "a", "ops"), "PreUpgradeFailed", true, false},
		{"an UpgradePod failure after PostUpgrade started is stale", "a", "PostUpgrade", event(events.TypeFailed, "a", "ops"), "UpgradePodFailed", true, false},
		{"an UpgradePod failure during UpgradePod counts", "a", "UpgradePod", event(events.TypeFailed, "a", "ops"), "UpgradePodFailed", false, false},
		{"a PreUpgrade failure during the wake-up counts", "a", "ResumeSucceed", event(events.TypeFailed, "a", "ops"), "PreUpgradeFailed", false, false},
		{"a later stage's failure counts", "a", "PostUpgrade", event(events.TypeFailed, "a", "ops"), "PostUpgradeFailed", false, false},
		{"failure is final", "a", "UpgradePodFailed", event(events.TypePodReady, "a", "ops"), "PostUpgrade", true, false},
		{"success is final", "a", "Succeeded", event(events.TypeFailed, "a", "ops"), "PostUpgradeFailed", true, false},
		{"a second failure does not count again", "a", "PreUpgradeFailed", event(events.TypeFailed, "a", "ops"), "PreUpgradeFailed", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, skip := decide(tc.curAttempt, tc.curReason, tc.ev, tc.target)
			if (skip != "") != tc.wantSkip {
				t.Fatalf("decide skip = %q, want skip %v", skip, tc.wantSkip)
			}
			if skip != "" {
				return
			}
			if tr.To != tc.target || tr.New != tc.wantNew || tr.Attempt != tc.ev.Data.Attempt {
				t.Fatalf("decide = %+v, want to %s, new %v", tr, tc.target, tc.wantNew)
			}
			if !tc.wantNew && tr.From != tc.curReason {
				t.Fatalf("decide from = %q, want %q", tr.From, tc.curReason)
			}
		})
	}
}

// A later event of a newer direct attempt than the status records waits for its
// requested; an older direct attempt's late event, or an ops's, does not.
func TestDirectAhead(t *testing.T) {
	direct := func(typ, attempt string) events.Event {
		return events.Event{Type: typ, Data: events.Data{Attempt: attempt}}
	}
	for _, tc := range []struct {
		name string
		ev   events.Event
		cur  string
		want bool
	}{
		{"newer generation before its requested", direct(events.TypePostHookDone, "direct-abc-5"), "direct-old-3", true},
		{"no attempt recorded yet", direct(events.TypePreHookDone, "direct-abc-5"), "", true},
		{"after an ops's attempt", direct(events.TypePatched, "direct-abc-5"), "0b7c-uid", true},
		{"an older attempt's late event", direct(events.TypePostHookDone, "direct-old-3"), "direct-abc-5", false},
		{"the current attempt", direct(events.TypePostHookDone, "direct-abc-5"), "direct-abc-5", false},
		{"requested itself", direct(events.TypeRequested, "direct-abc-5"), "direct-old-3", false},
		{"an ops's event", events.Event{Type: events.TypePatched, Data: events.Data{Ops: events.OpsRef{Name: "up"}, Attempt: "uid-2"}}, "uid-1", false},
	} {
		if got := directAhead(tc.ev, tc.cur); got != tc.want {
			t.Errorf("%s: directAhead = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCheckpointKeptMessage: an UpgradePodFailed of a CheckpointRestore
// attempt filed without the checkpoint's note (a last delivery, the
// watchdog) gets it once the old pod is gone or going, and only then.
func TestCheckpointKeptMessage(t *testing.T) {
	const attempt = "uid-ops-1"
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sb", UID: "uid-sb",
		Annotations: map[string]string{upgrade.AnnotationUpgradeStrategy: upgrade.StrategyValue(attempt)}}}
	recreate := sb.DeepCopy()
	recreate.Annotations = nil
	now := metav1.Now()
	oldPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sb"}}
	goingPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sb", DeletionTimestamp: &now}}
	newPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sb", Annotations: map[string]string{
		upgrade.AnnotationPodAttempt: attempt, upgrade.AnnotationRestoreFrom: "ckpt-id-7"}}}
	chained := sb.DeepCopy()
	chained.Annotations[upgrade.AnnotationResumes] = upgrade.ResumesValue(attempt, "uid-ops-0", agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	chainPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sb", Annotations: map[string]string{
		upgrade.AnnotationPodAttempt: "uid-ops-0", upgrade.AnnotationRestoreFrom: "ckpt-id-3"}}}
	failed := transition{Attempt: attempt, To: agentsv1alpha1.UpgradingReasonUpgradePodFailed, Message: "podcycler gave up on prehook-done after 5 deliveries: boom"}
	noted := failed
	noted.Message = upgrade.WithNote("x", upgrade.CheckpointKeptNote("ns", "sb", "ckpt-id-7"))
	for _, tc := range []struct {
		name   string
		tr     transition
		sb     *agentsv1alpha1.Sandbox
		pod    *corev1.Pod
		wantID string // "" → message unchanged
	}{
		{"no pod", failed, sb, nil, "of this attempt"},
		{"old pod being deleted", failed, sb, goingPod, "of this attempt"},
		{"the attempt's new pod", failed, sb, newPod, "ckpt-id-7"},
		{"old pod still runs", failed, sb, oldPod, ""},
		{"the new pod of the attempt it continues", failed, chained, chainPod, "ckpt-id-3"},
		{"Recreate attempt", failed, recreate, nil, ""},
		{"note already there", noted, sb, nil, ""},
		{"another failure", transition{Attempt: attempt, To: agentsv1alpha1.UpgradingReasonPostUpgradeFailed, Message: "hook"}, sb, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkpointKeptMessage(tc.tr, tc.sb, tc.pod)
			if tc.wantID == "" {
				if got != tc.tr.Message {
					t.Errorf("message changed to %q", got)
				}
				return
			}
			if !strings.HasPrefix(got, tc.tr.Message) || !strings.Contains(got, "kept in checkpoint "+tc.wantID) || !upgrade.HasCheckpointKeptNote(got) {
				t.Errorf("message %q: want %q followed by the note naming %s", got, tc.tr.Message, tc.wantID)
			}
		})
	}
}

// A failure while its ops is being deleted names a new ops as the way on,
// not `kubectl molt retry` of an ops that is going away (a walk ran it and
// got "not found").
func TestFailureOfAnOpsBeingDeletedNamesANewOps(t *testing.T) {
	got := failureWithNextStepOf("hook failed with exit code 7", opsDeletedNextStep("up"))
	if strings.Contains(got, "kubectl molt retry") || !strings.Contains(got, "create a new SandboxUpdateOps") || !strings.Contains(got, "being deleted") {
		t.Errorf("message %q, want a new ops as the way on", got)
	}
	if stated := "the pod was deleted; create a new SandboxUpdateOps to resume"; failureWithNextStepOf(stated, opsDeletedNextStep("up")) != stated {
		t.Error("a failure that says what to do got a second way on")
	}
}
