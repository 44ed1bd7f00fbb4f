package statusagg

import (
	"bytes"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// maxNamedFailures is how many failed sandboxes a condition message names.
const maxNamedFailures = 10

// namedList is names joined by commas, the first maxNamedFailures of them
// and " and N more".
func namedList(names []string) string {
	list := strings.Join(names[:min(len(names), maxNamedFailures)], ", ")
	if extra := len(names) - maxNamedFailures; extra > 0 {
		list += fmt.Sprintf(" and %d more", extra)
	}
	return list
}

// desiredOpsStatus recomputes an unfinished ops' status from the selection
// of its namespace's sandboxes (sel, or selErr when the spec cannot select)
// and the namespace's active ops:
//   - counters from the selection: replicas = total, updated, updating,
//     failed; updated never goes down during an ops: a sandbox counted as
//     updated that has left the selection (deleted, relabelled) stays
//     counted, in updated and in replicas, so replicas = updated + updating
//   - failed + not started holds at every write;
//   - a patch selector found unworkable → Failed, InvalidPatch=True;
//   - a selector that is not a valid label selector (it cannot change) → Failed,
//     Progressing=False/InvalidSpec, so it does not hold the namespace;
//   - not the active ops → Pending, WaitingForNamespace=True naming it;
//   - another spec error (maxUnavailable) → Pending, Progressing=False/InvalidSpec;
//   - nothing to update → Completed, Progressing=False/NothingToUpdate, saying
//     which rules left the namespace's sandboxes out (upgrade.NothingSelected);
//     NothingSelected instead when none of them is selected at all;
//   - all updated → Completed, Progressing=False/Completed;
//   - failures, nothing updating, and nothing left to start or no budget to
//     start it → Failed, FailureBudgetExhausted=True naming the failures;
//   - nothing upgrading, and every sandbox not started is one whose claim the
//     API server refused → Failed, Progressing=False/ClaimRefused;
//   - else Updating, Progressing=True (reason Paused while spec.paused); Pending
//     while no sandbox has started (and it was never Updating).
func desiredOpsStatus(ops, active *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection, selErr error) agentsv1alpha1.SandboxUpdateOpsStatus {
	st := *ops.Status.DeepCopy()
	gen := ops.Generation
	st.ObservedGeneration = gen
	// Updated sandboxes deleted since: those the SandboxesDeleted condition counts,
	// and at least as many as keep updated from going down (a delete statusagg did
	// not see, as it was not running).
	departed := max(updatedDeparted(ops.Status), int(ops.Status.UpdatedReplicas)-sel.Updated, 0)
	st.Replicas, st.UpdatedReplicas = int32(sel.Total()+departed), int32(sel.Updated+departed)
	st.UpdatingReplicas, st.FailedReplicas = int32(sel.Updating), int32(sel.Failed)

	if problem := upgrade.PatchProblem(ops); problem != "" {
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionInvalidPatch, Status: metav1.ConditionTrue,
			Reason: agentsv1alpha1.InvalidPatchReasonRefused, Message: problem, ObservedGeneration: gen})
		if upgrade.PatchChanged(ops) {
			// Admitted under the first patch: nothing more is admitted, and the ops
			// holds its namespace (stays Updating) until those in a stage end, as a
			// deleted one does, so a next ops never runs beside them.
			if sel.Updating > 0 {
				st.Phase = agentsv1alpha1.SandboxUpdateOpsUpdating
				setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.ProgressingReasonInvalidPatch, ObservedGeneration: gen,
					Message: fmt.Sprintf("spec.patch changed after its check: nothing more is admitted; waiting for %s in a stage to end", upgrade.Sandboxes(sel.Updating))})
				return st
			}
			st.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
			setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse,
				Reason: agentsv1alpha1.ProgressingReasonInvalidPatch, Message: "spec.patch changed after its check: nothing more was admitted", ObservedGeneration: gen})
			return st
		}
		st.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse,
			Reason: agentsv1alpha1.ProgressingReasonInvalidPatch, Message: "the patch cannot work; no sandbox was touched", ObservedGeneration: gen})
		return st
	}

	if _, err := upgrade.LabelSelector(ops); err != nil {
		// spec.selector cannot change, so this ops can never select anything: it is
		// finished, and does not hold the namespace from the next ops.
		st.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse,
			Reason: agentsv1alpha1.ProgressingReasonInvalidSpec, ObservedGeneration: gen,
			Message: fmt.Sprintf("%v; no sandbox was touched: spec.selector cannot be changed, so delete this SandboxUpdateOps and create one with a valid selector", err)})
		return st
	}

	warnOfAddedContainers(&st, ops, sel)
	warnOfNoBackup(&st, ops, sel)
	warnOfBackupOffVolumes(&st, ops, sel)
	if refused := upgrade.ClaimRefused(ops); len(refused) > 0 {
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionClaimRefused, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.ClaimRefusedReasonAPIServer,
			Message: upgrade.ClaimRefusedNote(ops.Namespace, ops.Name, refused), ObservedGeneration: gen})
	}

	if active != nil && active.Name != ops.Name {
		st.Phase = agentsv1alpha1.SandboxUpdateOpsPending
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionWaitingForNamespace, Status: metav1.ConditionTrue,
			Reason: agentsv1alpha1.WaitingReasonAnotherOpsActive, Message: waitingFor(active), ObservedGeneration: gen})
		return st
	}
	if meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionWaitingForNamespace) != nil {
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionWaitingForNamespace, Status: metav1.ConditionFalse,
			Reason: agentsv1alpha1.WaitingReasonNamespaceFree, ObservedGeneration: gen})
	}

	progressing := metav1.Condition{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, ObservedGeneration: gen}
	switch {
	case selErr != nil:
		st.Phase = agentsv1alpha1.SandboxUpdateOpsPending
		progressing.Reason, progressing.Message = agentsv1alpha1.ProgressingReasonInvalidSpec, selErr.Error()+"; nothing is admitted until it is fixed: edit this SandboxUpdateOps"
	case sel.Total() == 0:
		st.Phase = agentsv1alpha1.SandboxUpdateOpsCompleted
		progressing.Reason, progressing.Message = agentsv1alpha1.ProgressingReasonNothingToUpdate, upgrade.NothingSelected(ops.Namespace, sel)
		if sel.SelectsNothing() {
			progressing.Reason = agentsv1alpha1.ProgressingReasonNothingSelected
			next := "; if a rule above left sandboxes out by mistake, delete this ops and apply it again with spec.selector, spec.stateFilter or its namespace fixed (spec.selector is immutable)"
			if len(sel.Excluded) == 0 {
				next = "; if the sandboxes are in another namespace, delete this ops and apply it in theirs"
			}
			progressing.Message = agentsv1alpha1.TruncateConditionMessage("nothing was upgraded: " + progressing.Message + next)
		}
		if p := bytes.TrimSpace(ops.Spec.Patch.Raw); len(p) == 0 || string(p) == "{}" || string(p) == "null" {
			// "already have the patched template" is true of an empty patch,
			// and says nothing: what an ops without one is for does.
			progressing.Message = agentsv1alpha1.TruncateConditionMessage("spec.patch is empty, and no selected sandbox is resuming a failed upgrade: an ops without a patch only finishes sandboxes an earlier ops left failed (its hooks run on those), so there is nothing to do; to upgrade sandboxes, delete this ops and apply it again with spec.patch (it is immutable). What was found: " + progressing.Message)
		}
	case sel.Updated == sel.Total():
		st.Phase = agentsv1alpha1.SandboxUpdateOpsCompleted
		// The counters count the updated sandboxes deleted since: so does
		// the message.
		progressing.Reason, progressing.Message = agentsv1alpha1.ProgressingReasonCompleted, fmt.Sprintf("all %d sandboxes updated", sel.Total()+departed)
		if sel.Total()+departed == 1 {
			progressing.Message = "the 1 sandbox updated"
		}
		if departed > 0 {
			progressing.Message += fmt.Sprintf(" (%d of them deleted since: condition SandboxesDeleted)", departed)
		}
		if left := upgrade.LeftOutByStateFilter(sel); left != "" {
			progressing.Message = agentsv1alpha1.TruncateConditionMessage(progressing.Message + "; " + left + ": `kubectl molt plan -f <ops file>` lists them")
		}
	case sel.Failed > 0 && sel.Updating == 0 && (sel.NotStarted == 0 || sel.BudgetExhausted()):
		st.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
		msg := failureMessage(ops, sel)
		progressing.Reason, progressing.Message = agentsv1alpha1.ProgressingReasonFailureBudgetExhausted, msg
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionFailureBudgetExhausted, Status: metav1.ConditionTrue,
			Reason: agentsv1alpha1.BudgetReasonSandboxesFailed, Message: msg, ObservedGeneration: gen})
	case sel.Stuck():
		st.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
		progressing.Reason = agentsv1alpha1.ProgressingReasonClaimRefused
		progressing.Message = fmt.Sprintf("%d of %d sandboxes updated, %d failed; the %d not started %s the API server refuses to let this ops claim (condition ClaimRefused says why), and nothing is upgrading, so this ops is final: fix the cause, then `kubectl molt retry %s -n %s`",
			sel.Updated, sel.Total(), sel.Failed, sel.NotStarted, upgrade.Agree(sel.NotStarted, "is one", "are all ones"), ops.Name, ops.Namespace)
		if sel.Failed > 0 {
			// The failures are said as any failed ops says them (the names,
			// what to do, an image that cannot be pulled).
			msg := failureMessage(ops, sel)
			progressing.Message = agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("the %s not started %s the API server refuses to let this ops claim (condition ClaimRefused says why); ", upgrade.Sandboxes(sel.NotStarted), upgrade.Agree(sel.NotStarted, "is one", "are all ones")) + msg)
			setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionFailureBudgetExhausted, Status: metav1.ConditionTrue,
				Reason: agentsv1alpha1.BudgetReasonSandboxesFailed, Message: msg, ObservedGeneration: gen})
		}
	default:
		st.Phase = agentsv1alpha1.SandboxUpdateOpsUpdating
		if sel.Updated+sel.Updating+sel.Failed+departed == 0 && ops.Status.Phase != agentsv1alpha1.SandboxUpdateOpsUpdating {
			// No sandbox started yet (paused from its creation, or held by
			// molt's pause): Pending, as the guides show it. Once Updating it
			// stays so: a phase does not go back.
			st.Phase = agentsv1alpha1.SandboxUpdateOpsPending
		}
		progressing.Status, progressing.Reason = metav1.ConditionTrue, agentsv1alpha1.ProgressingReasonUpdating
		if ops.Spec.Paused {
			progressing.Reason = agentsv1alpha1.ProgressingReasonPaused
		}
		progressing.Message = fmt.Sprintf("%d of %d sandboxes updated, %d updating, %d failed", sel.Updated, sel.Total(), sel.Updating, sel.Failed)
		if v, ok := upgrade.PausedForMisspelling(ops); ok {
			progressing.Reason = agentsv1alpha1.ProgressingReasonMisspeltContainer
			progressing.Message = agentsv1alpha1.TruncateConditionMessage(upgrade.MisspellingNote(ops.Namespace, ops.Name, v))
		} else if v, ok := upgrade.PausedForNoBackup(ops); ok {
			progressing.Reason = agentsv1alpha1.ProgressingReasonNoBackup
			progressing.Message = agentsv1alpha1.TruncateConditionMessage(upgrade.NoBackupNote(ops.Namespace, ops.Name, v))
		} else if v, ok := upgrade.PausedForCheckpointKept(ops); ok {
			progressing.Reason = agentsv1alpha1.ProgressingReasonCheckpointKept
			progressing.Message = agentsv1alpha1.TruncateConditionMessage(upgrade.CheckpointKeptPauseNote(ops.Namespace, ops.Name, v))
		} else if v, ok := upgrade.PausedForBackupOffVolume(ops); ok {
			progressing.Reason = agentsv1alpha1.ProgressingReasonBackupNotOnVolume
			progressing.Message = agentsv1alpha1.TruncateConditionMessage(upgrade.BackupOffVolumePauseNote(ops.Namespace, ops.Name, v))
		} else if ops.Spec.Paused {
			progressing.Message += fmt.Sprintf("; paused: no sandbox is started until spec.paused is false (kubectl patch suo %s -n %s --type merge -p '{\"spec\":{\"paused\":false}}')", ops.Name, ops.Namespace)
		}
	}
	setCondition(&st.Conditions, progressing)
	return st
}

// warnOfAddedContainers sets PatchAddsContainers, once, when the patch adds containers
// to the template of the first selected sandbox not started yet: before the first batch
// if the ops waits, so a misspelt container name can be caught before it spreads.
func warnOfAddedContainers(st *agentsv1alpha1.SandboxUpdateOpsStatus, ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) {
	if meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionPatchAddsContainers) != nil {
		return
	}
	for _, c := range sel.Candidates {
		tpl := c.Sandbox.Spec.Template
		if c.State != upgrade.NotStarted || tpl == nil {
			continue
		}
		added := upgrade.AddedContainers(tpl, ops.Spec.Patch.Raw)
		if len(added) == 0 {
			return
		}
		var have []string
		for _, ctr := range tpl.Spec.Containers {
			have = append(have, ctr.Name)
		}
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionPatchAddsContainers, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.AddsReasonNotInTemplate, ObservedGeneration: ops.Generation,
			Message: fmt.Sprintf("spec.patch adds %s, which sandbox %s's template does not have (its containers: %s): %s. "+
				"If the patch was meant to change an existing container, the name is misspelt: delete this ops and create one with the right name (molt pauses, before its first sandbox, an ops whose added container looks like a misspelt name; otherwise pause it first: kubectl patch suo %s -n %s --type merge -p '{\"spec\":{\"paused\":true}}')",
				strings.Join(added, ", "), c.Sandbox.Name, strings.Join(have, ", "), upgrade.AddedOutcome(tpl, ops.Spec.Patch.Raw), ops.Name, ops.Namespace)})
		return
	}
}

// warnOfBackupOffVolumes sets BackupNotOnVolume, once, when the hooks name no
// path on a volume of the first selected sandbox not started yet's patched
// template that outlives its pod (upgrade.BackupOffVolumes).
func warnOfBackupOffVolumes(st *agentsv1alpha1.SandboxUpdateOpsStatus, ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) {
	if meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionBackupNotOnVolume) != nil {
		return
	}
	if name, paths := upgrade.SelectedBackupOffVolumes(ops, sel); len(paths) > 0 {
		setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionBackupNotOnVolume, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.BackupReasonNoPersistentVolume, ObservedGeneration: ops.Generation,
			Message: agentsv1alpha1.TruncateConditionMessage(upgrade.BackupOffVolumesNote(name, paths))})
	}
}

// warnOfNoBackup sets PostUpgradeWithoutBackup, once, when the ops would give
// sandboxes a new pod with no backup taken first while its postUpgrade runs
// on them (upgrade.WithoutBackup): before the first batch if the ops waits.
func warnOfNoBackup(st *agentsv1alpha1.SandboxUpdateOpsStatus, ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) {
	if meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionPostUpgradeWithoutBackup) != nil {
		return
	}
	names := upgrade.WithoutBackup(ops, sel)
	if len(names) == 0 {
		return
	}
	list := namedList(names)
	setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionPostUpgradeWithoutBackup, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.NoBackupReasonNoPreUpgrade, ObservedGeneration: ops.Generation,
		Message: agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("spec.lifecycle has a postUpgrade hook but no preUpgrade: %s (%s) %s a new pod with no backup of %s taken by this ops, and postUpgrade then runs on %s: %s workspace is lost, and a restore finds no backup of %s, or the one an earlier upgrade took if its postUpgrade kept it (work since then is lost). "+
			"molt pauses the ops before its first sandbox for this (Progressing reason NoBackup), once: if that is not meant, delete it (kubectl delete suo %s -n %s) and create one with the preUpgrade that takes the backup, "+
			"or one that selects only the failed sandboxes (agents.kruise.io/upgrade-failed: \"true\" in spec.selector.matchLabels)",
			upgrade.Sandboxes(len(names)), list, upgrade.Agree(len(names), "gets", "get"), upgrade.Agree(len(names), "its own", "theirs"), upgrade.Agree(len(names), "it", "them"),
			upgrade.Agree(len(names), "its", "their"), upgrade.Agree(len(names), "its own", "theirs"), ops.Name, ops.Namespace))})
}

// waitingFor says what an ops that is not the active one waits for.
func waitingFor(active *agentsv1alpha1.SandboxUpdateOps) string {
	if active.DeletionTimestamp != nil {
		return fmt.Sprintf("waiting for SandboxUpdateOps %s, being deleted, to end the attempts it started", active.Name)
	}
	if v, ok := upgrade.PausedForMisspelling(active); ok {
		return fmt.Sprintf("waiting for SandboxUpdateOps %s, which molt paused before its first sandbox as its patch adds %s (a misspelt container name?): it finishes only once deleted, or resumed if the new container is meant (kubectl describe suo %s -n %s)",
			active.Name, v, active.Name, active.Namespace)
	}
	if v, ok := upgrade.PausedForNoBackup(active); ok {
		return fmt.Sprintf("waiting for SandboxUpdateOps %s, which molt paused before its first sandbox as sandboxes %s would get a new pod with no backup of their workspace: it finishes only once deleted, or resumed if those workspaces may go (kubectl describe suo %s -n %s)",
			active.Name, v, active.Name, active.Namespace)
	}
	if v, ok := upgrade.PausedForCheckpointKept(active); ok {
		return fmt.Sprintf("waiting for SandboxUpdateOps %s, which molt paused before its first sandbox as it would start sandboxes %s, whose workspace is kept only in a checkpoint, from an empty filesystem: it finishes only once deleted, or resumed if those workspaces may go (kubectl describe suo %s -n %s)",
			active.Name, v, active.Name, active.Namespace)
	}
	if v, ok := upgrade.PausedForBackupOffVolume(active); ok {
		return fmt.Sprintf("waiting for SandboxUpdateOps %s, which molt paused before its first sandbox as its hooks back up to %s, on no volume that outlives the pod: it finishes only once deleted, or resumed if the hooks keep the backup elsewhere (kubectl describe suo %s -n %s)",
			active.Name, v, active.Name, active.Namespace)
	}
	if active.Spec.Paused {
		return fmt.Sprintf("waiting for SandboxUpdateOps %s to finish; it is paused, so it finishes only once resumed (kubectl patch suo %s -n %s --type merge -p '{\"spec\":{\"paused\":false}}') or deleted",
			active.Name, active.Name, active.Namespace)
	}
	return fmt.Sprintf("waiting for SandboxUpdateOps %s to finish", active.Name)
}

// failureMessage names the failed sandboxes (up to maxNamedFailures), how
// many were not started, and what to do next.
func failureMessage(ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) string {
	var names, messages []string
	var starts []*agentsv1alpha1.Sandbox // what a retry would start
	failedWith := map[string]string{}
	for _, c := range sel.Candidates {
		if c.State == upgrade.NotStarted {
			starts = append(starts, c.Sandbox)
		}
		if c.State == upgrade.Failed {
			names = append(names, c.Sandbox.Name)
			starts = append(starts, c.Sandbox)
			up := meta.FindStatusCondition(c.Sandbox.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
			if up != nil && up.Reason == agentsv1alpha1.UpgradingReasonUpgradePodFailed {
				messages = append(messages, up.Message)
			}
			if up != nil {
				failedWith[c.Sandbox.Name] = up.Message
			}
		}
	}
	list := namedList(names)
	head := fmt.Sprintf("%d of %d sandboxes failed (maxUnavailable %d): %s; %d not started; this ops is final (editing it changes nothing): ", sel.Failed, sel.Total(), sel.MaxUnavailable, list, sel.NotStarted)
	if only := upgrade.OnlyRecreateResumes(ops.Spec.UpdateStrategy.EffectiveType(), failedWith); len(only) > 0 {
		return head + fmt.Sprintf("no CheckpointRestore ops can resume %s (a retry keeps the strategy and fails the same way; `kubectl describe sbx -n %s NAME` says why): resume %s with a new SandboxUpdateOps of updateStrategy.type Recreate that selects %s, with the preUpgrade and postUpgrade that keep the workspace",
			namedList(only), ops.Namespace, upgrade.Agree(len(only), "it", "them"), upgrade.Agree(len(only), "it", "them"))
	}
	if hint := upgrade.ImageNotPulledHint(ops.Spec.Patch.Raw, messages); hint != "" {
		return head + hint
	}
	if bare, added := upgrade.ImagelessAdds(ops.Spec.Patch.Raw, starts); len(bare) > 0 {
		return head + upgrade.ImagelessRetryHint(namedList(bare), ops.Namespace, added, len(bare) < len(starts))
	}
	return head + fmt.Sprintf("read a failed sandbox's reason with `kubectl describe sbx -n %s NAME`, fix the cause, then `kubectl molt retry %s -n %s` (it keeps this ops's patch and hooks: if one of them is the cause, create a new SandboxUpdateOps with it fixed instead)",
		ops.Namespace, ops.Name, ops.Namespace)
}

// waitForStarting is want, a Completed status, held back while n sandboxes
// the selector matches are still starting (upgrade.Starting, by phase): phase
// Updating (Pending when nothing is selected yet), Progressing True
// SandboxesStarting saying what it waits for.
func waitForStarting(ops *agentsv1alpha1.SandboxUpdateOps, want agentsv1alpha1.SandboxUpdateOpsStatus, sel upgrade.Selection, n int, phases map[string]int) agentsv1alpha1.SandboxUpdateOpsStatus {
	held := *want.DeepCopy()
	held.Phase = agentsv1alpha1.SandboxUpdateOpsUpdating
	if sel.Total() == 0 && ops.Status.Phase != agentsv1alpha1.SandboxUpdateOpsUpdating {
		held.Phase = agentsv1alpha1.SandboxUpdateOpsPending // never back from Updating
	}
	setCondition(&held.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue,
		Reason: agentsv1alpha1.ProgressingReasonSandboxesStarting, Message: upgrade.StartingMessage(n, phases), ObservedGeneration: ops.Generation})
	return held
}
