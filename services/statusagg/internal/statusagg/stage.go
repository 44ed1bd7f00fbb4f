package statusagg

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// stageOf is the Upgrading reason an event reports. requested begins
// Resuming for a paused sandbox woken for its upgrade (the patcher reports
// ResumeSucceed with stage-started once its old pod is Ready), PreUpgrade
// otherwise. prehook-done leads to
// Checkpointing for a sandbox upgraded by CheckpointRestore (the patcher has
// written the attempt's strategy, upgrade.AnnotationUpgradeStrategy, by
// then), else to UpgradePod. An event naming an unknown stage or failure reason is an error
// that no redelivery can fix.
func stageOf(ev events.Event, sb *agentsv1alpha1.Sandbox) (string, error) {
	switch ev.Type {
	case events.TypeRequested:
		if upgrade.AdmittedToWake(sb) {
			// A paused sandbox is woken with its old template first (or,
			// unpaused since, gets its pod back) before anything is patched.
			return agentsv1alpha1.UpgradingReasonResuming, nil
		}
		return agentsv1alpha1.UpgradingReasonPreUpgrade, nil
	case events.TypePatched:
		return agentsv1alpha1.UpgradingReasonPreUpgrade, nil
	case events.TypePreHookDone:
		if ev.Data.Checkpoint || upgrade.ChecksPoint(sb, ev.Data.Attempt) {
			return agentsv1alpha1.UpgradingReasonCheckpointing, nil
		}
		return agentsv1alpha1.UpgradingReasonUpgradePod, nil
	case events.TypePodReady:
		return agentsv1alpha1.UpgradingReasonPostUpgrade, nil
	case events.TypePostHookDone:
		return agentsv1alpha1.UpgradingReasonSucceeded, nil
	case events.TypeStageStarted:
		if !upgrade.InProgress(ev.Data.Stage) {
			return "", fmt.Errorf("stage-started names unknown stage %q", ev.Data.Stage)
		}
		return ev.Data.Stage, nil
	case events.TypeFailed:
		if !agentsv1alpha1.IsUpgradingFailedReason(ev.Data.Reason) {
			return "", fmt.Errorf("failed event names unknown reason %q", ev.Data.Reason)
		}
		return ev.Data.Reason, nil
	}
	return "", fmt.Errorf("unknown event type %q", ev.Type)
}

// transition is what one event changes in a sandbox's upgrade record.
type transition struct {
	Attempt string
	// New is true when the event begins the attempt; From is the reason the
	// attempt was at otherwise.
	New  bool
	From string
	// Resumes is the failed reason of the attempt a new one continues
	// (events.Data.ResumedReason), "" for a fresh start.
	Resumes string
	// To is the reason it moves to; Message explains a failure.
	To      string
	Message string
	// Note is preUpgrade's note on a stage that went on (prehook-done's
	// message: its stderr, or that it was not run), announced in an Event.
	Note string
}

// decide says how an event for attempt moves a sandbox whose status records
// curAttempt at curReason, or why it changes nothing (a non-empty skip):
//   - an event of another attempt begins that attempt if it is `requested`,
//     or if it comes from an ops (the sandbox is labelled with that ops, so
//     `requested` was only handled late); a direct upgrade's other events of
//     another attempt are stale, and so is its `requested` once the status
//     records a later direct attempt (a higher generation);
//   - within the attempt, a terminal reason (Succeeded, *Failed) is final;
//   - a failure ends the attempt from any stage;
//   - any other event must move forward along upgrade.Rank (a redelivered
//     earlier event changes nothing).
func decide(curAttempt, curReason string, ev events.Event, target string) (transition, string) {
	tr := transition{Attempt: ev.Data.Attempt, To: target}
	if ev.Type == events.TypePreHookDone {
		tr.Note = ev.Data.Message
	}
	if agentsv1alpha1.IsUpgradingFailedReason(target) || target == agentsv1alpha1.UpgradingReasonSucceeded {
		// A failure's cause, or a note on a success (a kept pod's postUpgrade
		// not run).
		tr.Message = agentsv1alpha1.TruncateConditionMessage(ev.Data.Message)
	}
	if ev.Data.Attempt != curAttempt {
		if ev.Type != events.TypeRequested && ev.Data.Ops.Name == "" {
			return transition{}, fmt.Sprintf("event of attempt %s, status records attempt %q", ev.Data.Attempt, curAttempt)
		}
		if gen, ok := upgrade.DirectAttemptGeneration(ev.Data.Attempt); ok {
			if curGen, curOK := upgrade.DirectAttemptGeneration(curAttempt); curOK && curGen > gen {
				// A late requested of a direct attempt the user's next
				// template edit superseded: it does not start again.
				return transition{}, fmt.Sprintf("requested of attempt %s, superseded by attempt %s", ev.Data.Attempt, curAttempt)
			}
		}
		tr.New, tr.Resumes = true, ev.Data.ResumedReason
		return tr, ""
	}
	tr.From = curReason
	switch {
	case upgrade.Terminal(curReason):
		return transition{}, "attempt already ended with " + curReason
	case target == agentsv1alpha1.UpgradingReasonPreUpgradeFailed && upgrade.Past(curReason, agentsv1alpha1.UpgradingReasonPreUpgrade):
		// The stages after PreUpgrade start only once its backup was taken: a
		// PreUpgrade failure filed after one started comes from a late
		// duplicate (a redelivered patched that found the old pod already
		// deleted), and would file a false failure over a live stage.
		return transition{}, fmt.Sprintf("attempt already at %s, past PreUpgrade: a late %s is stale", curReason, target)
	case target == agentsv1alpha1.UpgradingReasonUpgradePodFailed && upgrade.Past(curReason, agentsv1alpha1.UpgradingReasonUpgradePod):
		// PostUpgrade starts only once the new pod was reported Ready: an
		// UpgradePod failure filed after it started is podcycler's look at
		// the pod through a cache that did not show PostUpgrade yet (the
		// pod's container ended while the restore runs). PostUpgrade's own
		// hook, or its deadline, says how that stage ends; filed under
		// UpgradePod, a resume would rebuild the pod and restore again.
		return transition{}, fmt.Sprintf("attempt already at %s, past UpgradePod: a late %s is stale", curReason, target)
	case agentsv1alpha1.IsUpgradingFailedReason(target):
		return tr, ""
	case upgrade.Rank(target) <= upgrade.Rank(curReason):
		return transition{}, fmt.Sprintf("attempt already at %s, event reports %s", curReason, target)
	}
	return tr, ""
}

// directNextStep is added to the Warning Event of a direct upgrade's failure
// (the sandbox's own spec.upgradePolicy, no ops): the stages' next steps
// speak of ops. The condition keeps the stage's message as written, which
// kubectl molt reads the hook's output from.
const directNextStep = "this was a direct upgrade (spec.upgradePolicy): fix the cause and change spec.template again to retry (any change to it starts one, an annotation under spec.template.metadata too; set back to what the pod runs, when the pod was not replaced, it rolls back; a hook fixed alone in spec.lifecycle starts nothing: fix it in the same edit), or create a SandboxUpdateOps that selects the sandbox to resume it from where it failed (its spec.lifecycle runs in place of the sandbox's hooks, which come back once it has succeeded and the ops has ended: its postUpgrade must restore what the sandbox's preUpgrade backed up)"

// directAheadRetry is how soon an event of a direct attempt that came before its
// requested (directAhead) is handled again.
const directAheadRetry = time.Second

// directAhead reports whether ev, an event of a direct upgrade other than requested,
// belongs to a newer direct attempt than cur, the attempt the status records: its
// requested has not been recorded yet. A direct attempt's id ends with the sandbox's
// generation it was started at ("direct-<revision>-<generation>"), so an older
// attempt's late event is told apart and still skipped.
func directAhead(ev events.Event, cur string) bool {
	if ev.Type == events.TypeRequested || ev.Data.Ops.Name != "" || ev.Data.Attempt == cur {
		return false
	}
	gen, ok := upgrade.DirectAttemptGeneration(ev.Data.Attempt)
	if !ok {
		return false
	}
	curGen, curDirect := upgrade.DirectAttemptGeneration(cur)
	return !curDirect || gen > curGen
}

// checkpointKeptMessage is the message of tr, a failure of sb's attempt whose
// pod is now pod (nil when it has none), with upgrade.CheckpointKeptNote
// added when tr is an UpgradePodFailed of a CheckpointRestore attempt whose
// old pod is gone or going (no pod, a new pod of the attempt or of a failed
// attempt it continues, or one being deleted) and the message does not say
// so yet: whoever filed it (a
// handler's last delivery, the watchdog) may not have known, and a Recreate
// ops resuming the sandbox would start its new pod from an empty filesystem
// while the workspace sits in the checkpoint.
func checkpointKeptMessage(tr transition, sb *agentsv1alpha1.Sandbox, pod *corev1.Pod) string {
	if tr.To != agentsv1alpha1.UpgradingReasonUpgradePodFailed || !upgrade.ChecksPoint(sb, tr.Attempt) || upgrade.HasCheckpointNote(tr.Message) {
		return tr.Message
	}
	if pod != nil && pod.DeletionTimestamp == nil && !upgrade.NewPodOf(pod, tr.Attempt) && !upgrade.BuiltByResumed(pod, sb, tr.Attempt, "") {
		return tr.Message // the old pod still runs, and holds the workspace
	}
	id := "of this attempt"
	if pod != nil && pod.Annotations[upgrade.AnnotationRestoreFrom] != "" {
		id = pod.Annotations[upgrade.AnnotationRestoreFrom]
	}
	return upgrade.WithNote(tr.Message, upgrade.CheckpointKeptNote(sb.Namespace, sb.Name, id))
}
