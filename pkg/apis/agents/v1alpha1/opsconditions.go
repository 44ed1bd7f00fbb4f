package v1alpha1

// Reasons of the SandboxUpdateOps conditions. Produced by statusagg; read by
// users (kubectl describe), kubectl molt and dashboards.
const (
	// WaitingReasonAnotherOpsActive: WaitingForNamespace=True, another ops of
	// the namespace is active; the message names it.
	WaitingReasonAnotherOpsActive = "AnotherOpsActive"
	// WaitingReasonNamespaceFree: WaitingForNamespace=False, this ops is the
	// active one now.
	WaitingReasonNamespaceFree = "NamespaceFree"

	// ProgressingReasonUpdating: Progressing=True, sandboxes are being upgraded.
	ProgressingReasonUpdating = "Updating"
	// ProgressingReasonPaused: Progressing=True while spec.paused: no new
	// sandbox is admitted, those upgrading finish.
	ProgressingReasonPaused = "Paused"
	// ProgressingReasonMisspeltContainer: Progressing=True, paused by the
	// selector before the first sandbox, as the patch adds a container that
	// looks like a misspelt name (upgrade.AnnotationMisspeltContainer); the
	// message says which and the two ways on. A Warning Event of the same
	// name.
	ProgressingReasonMisspeltContainer = "MisspeltContainer"
	// ProgressingReasonNoBackup: Progressing=True, paused by the selector
	// before the first sandbox, as sandboxes would get a new pod with no
	// backup of their workspace (upgrade.Unprotected,
	// upgrade.AnnotationNoBackup); the message names them and the ways on. A
	// Warning Event of the same name.
	ProgressingReasonNoBackup = "NoBackup"
	// ProgressingReasonCheckpointKept: Progressing=True, paused by the
	// selector before the first sandbox, as a Recreate ops would resume
	// sandboxes whose workspace is kept only in a checkpoint of a failed
	// CheckpointRestore attempt, and start them empty
	// (upgrade.CheckpointLeftBehind, upgrade.AnnotationCheckpointKept); the
	// message names them and the ways on. A Warning Event of the same name.
	ProgressingReasonCheckpointKept = "CheckpointKept"
	// ProgressingReasonBackupNotOnVolume: Progressing=True, paused by the
	// selector before the first sandbox, as the hooks back up to paths none of
	// which outlives the pod (ConditionBackupNotOnVolume,
	// upgrade.AnnotationBackupOffVolume); the message names them and the ways
	// on. A Warning Event of the same name.
	ProgressingReasonBackupNotOnVolume = "BackupNotOnVolume"
	// ProgressingReasonSandboxesStarting: Progressing=True, the ops would
	// complete, but sandboxes its selector matches have just been created
	// and have no phase yet, or are Pending: it waits for them to start (at
	// most upgrade.SettleWait after their creation) before deciding whether
	// it upgrades them, so an ops applied together with its sandboxes does
	// not end with nothing done.
	ProgressingReasonSandboxesStarting = "SandboxesStarting"
	// ProgressingReasonCompleted: Progressing=False, every sandbox is updated.
	ProgressingReasonCompleted = "Completed"
	// ProgressingReasonNothingToUpdate: Progressing=False, phase Completed: no
	// sandbox needs the patch, and some the selector and stateFilter match
	// already have the patched template (an ops applied again); the message
	// says which rules left the sandboxes out.
	ProgressingReasonNothingToUpdate = "NothingToUpdate"
	// ProgressingReasonNothingSelected: Progressing=False, phase Completed:
	// no sandbox of the namespace is selected at all (a typo in the
	// selector, a stateFilter that leaves every one out, a namespace without
	// sandboxes), so nothing was upgraded; the message says which rules left
	// the sandboxes out. A Warning Event of the same name, and `kubectl molt
	// status` exits 3.
	ProgressingReasonNothingSelected = "NothingSelected"
	// ProgressingReasonFailureBudgetExhausted: Progressing=False, failures
	// used up maxUnavailable (see the FailureBudgetExhausted condition).
	ProgressingReasonFailureBudgetExhausted = "FailureBudgetExhausted"
	// ProgressingReasonInvalidSpec: Progressing=False, the selector or
	// maxUnavailable cannot be used; the message says why.
	ProgressingReasonInvalidSpec = "InvalidSpec"

	// BudgetReasonSandboxesFailed: FailureBudgetExhausted=True; the message
	// names the failed sandboxes and how many were not started.
	BudgetReasonSandboxesFailed = "SandboxesFailed"

	// ConditionInvalidPatch is True when the ops's patch cannot work at all
	// (selector checked it before admitting anything): the ops is Failed and
	// no sandbox was touched; the message names the field and the API
	// server's words.
	ConditionInvalidPatch = "InvalidPatch"
	// InvalidPatchReasonRefused: InvalidPatch=True.
	InvalidPatchReasonRefused = "PatchRefused"
	// ProgressingReasonInvalidPatch: Progressing=False, the patch cannot work.
	ProgressingReasonInvalidPatch = "InvalidPatch"

	// ConditionSandboxesDeleted is True once a sandbox the ops was upgrading
	// was deleted mid-attempt (or after it succeeded); the message counts them,
	// and how many had succeeded, then names the newest (deletedRecord). They
	// leave the counters; an updated one stays counted as updated.
	ConditionSandboxesDeleted = "SandboxesDeleted"
	// DeletedReasonDuringUpgrade: SandboxesDeleted=True.
	DeletedReasonDuringUpgrade = "DeletedDuringUpgrade"

	// ConditionDeleting is True while an ops being deleted waits for the
	// sandboxes it claimed to end their attempt; the message names them.
	// Without it `kubectl delete` would seem to hang with no reason.
	ConditionDeleting = "Deleting"
	// DeletingReasonWaitingForSandboxes: Deleting=True.
	DeletingReasonWaitingForSandboxes = "WaitingForSandboxes"
	// DeletingReasonReleasePending: Deleting=True, no sandbox is in an
	// attempt of the ops any more, yet some still carry its label (or its
	// finalizer is still on it) a while after the delete: the selector,
	// which removes both, is not running, or the API server refuses its
	// writes. The message names them and where to look. A Warning Event of
	// the same name.
	DeletingReasonReleasePending = "ReleasePending"
	// DeletingReasonReleasing: Deleting=True, after ReleasePending, once the
	// selector's release makes progress again.
	DeletingReasonReleasing = "Releasing"

	// ConditionPatchAddsContainers is True when the patch names a container
	// that a selected sandbox's template does not have: the strategic merge
	// adds it (a sidecar, or a misspelt container name). A warning, with an
	// Event of the same name: the ops goes on.
	ConditionPatchAddsContainers = "PatchAddsContainers"
	// AddsReasonNotInTemplate: PatchAddsContainers=True.
	AddsReasonNotInTemplate = "NotInTemplate"

	// ConditionPostUpgradeWithoutBackup is True when the ops has a postUpgrade
	// hook but no preUpgrade and gives selected sandboxes a new pod with no
	// backup of theirs taken (upgrade.WithoutBackup): their workspace is lost.
	// A warning, with an Event of the same name: the ops goes on.
	ConditionPostUpgradeWithoutBackup = "PostUpgradeWithoutBackup"
	// NoBackupReasonNoPreUpgrade: PostUpgradeWithoutBackup=True.
	NoBackupReasonNoPreUpgrade = "NoPreUpgrade"

	// ConditionBackupNotOnVolume is True when the ops's preUpgrade and
	// postUpgrade name paths none of which is on a volume of a selected
	// sandbox's template that outlives its pod (upgrade.BackupOffVolumes): a
	// backup written there goes with the old pod. The selector pauses the ops
	// before its first sandbox for it, once (Progressing reason
	// ProgressingReasonBackupNotOnVolume, with a Warning Event of that name):
	// resuming it is how a user says the hooks send the backup out of the pod
	// another way.
	ConditionBackupNotOnVolume = "BackupNotOnVolume"
	// BackupReasonNoPersistentVolume: BackupNotOnVolume=True.
	BackupReasonNoPersistentVolume = "NoPersistentVolume"

	// ConditionEventStreamUnavailable is True on an ops that has not ended
	// while statusagg has not reached NATS for a while: no sandbox moves on
	// until it is back (each stage then goes on where it stopped). The
	// message names the server, since when, and what to check. Removed once
	// NATS is back. A Warning Event of the same name.
	ConditionEventStreamUnavailable = "EventStreamUnavailable"
	// EventStreamReasonNATSUnreachable: EventStreamUnavailable=True.
	EventStreamReasonNATSUnreachable = "NATSUnreachable"

	// ConditionStagesStalled is True on an ops that has not ended while some
	// of its sandboxes made no progress past their stage's deadline and
	// statusagg's watchdog published the stage's input again: the message
	// names them (with the stage and the re-drive) and the service to check.
	// Removed once they move on (or fail). A Warning Event of the same name.
	ConditionStagesStalled = "StagesStalled"
	// StagesStalledReasonRedriven: StagesStalled=True.
	StagesStalledReasonRedriven = "Redriven"

	// ConditionClaimRefused is True when the API server refused for good the
	// write that claims sandboxes for the ops (upgrade.AnnotationClaimRefused):
	// the message names them with the server's words. They are not tried
	// again; once nothing else can start the ops ends Failed (Progressing
	// reason ClaimRefused). A Warning Event of the same name.
	ConditionClaimRefused = "ClaimRefused"
	// ClaimRefusedReasonAPIServer: ClaimRefused=True.
	ClaimRefusedReasonAPIServer = "RefusedByAPIServer"
	// ProgressingReasonClaimRefused: Progressing=False, phase Failed: nothing
	// is upgrading and every sandbox not started is one whose claim was
	// refused, so nothing more can happen.
	ProgressingReasonClaimRefused = "ClaimRefused"
)

// IsSelectorPauseReason reports whether reason is the Progressing reason of
// an ops the selector paused itself before its first sandbox
// (MisspeltContainer, NoBackup, CheckpointKept, BackupNotOnVolume): each says
// why and the ways on, and has a Warning Event of its name.
func IsSelectorPauseReason(reason string) bool {
	switch reason {
	case ProgressingReasonMisspeltContainer, ProgressingReasonNoBackup, ProgressingReasonCheckpointKept, ProgressingReasonBackupNotOnVolume:
		return true
	}
	return false
}
