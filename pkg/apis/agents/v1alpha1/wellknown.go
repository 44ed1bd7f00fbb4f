package v1alpha1

// This file names the labels, annotations, finalizer, condition types and
// condition reasons of the wire contract (shared/API.md). Each says who
// writes it and who reads it; the services are selector, patcher,
// hookrunner, podcycler and statusagg (shared/DESIGN.md).

// Prefix is the prefix of every agents.kruise.io label and annotation.
const Prefix = GroupName + "/"

// Labels and annotations.
const (
	// LabelUpdateOps is the Sandbox label naming the SandboxUpdateOps that
	// claimed it. Written and removed by selector; read by every service to
	// find a sandbox's ops.
	LabelUpdateOps = Prefix + "update-ops"

	// LabelUpgradeFailed is the Sandbox label set to "true" while its
	// upgrade is failed, in step with a failed Upgrading condition. Read by
	// selector: a failed sandbox uses up budget, and a later ops resumes it.
	LabelUpgradeFailed = Prefix + "upgrade-failed"

	// AnnotationUpgradeResumeTrigger is the Sandbox annotation set to
	// "true" while a paused sandbox is admitted to be upgraded. Written by
	// selector at admission, removed with the ops; read through
	// upgrade.AdmittedToWake by podcycler (it builds the pod that wakes the
	// sandbox), the patcher (it waits for that pod) and statusagg
	// (Resuming), and through upgrade.WokenForUpgrade (still paused) by
	// podcycler's pause, which keeps the pod until the attempt ends.
	AnnotationUpgradeResumeTrigger = Prefix + "upgrade-resume-trigger"

	// LabelSandboxClaimed is the Sandbox label "true"/"false": whether the
	// sandbox was claimed out of its pool by a user. Written "false" by
	// selector on the pool members it creates, "true" by whoever claims (who
	// also removes the SandboxSet's controller reference; either alone makes
	// the sandbox leave the pool, upgrade.PoolOf); part of the SandboxSet's
	// status.selector (statusagg).
	LabelSandboxClaimed = Prefix + "sandbox-claimed"

	// LabelSandboxPool is the Sandbox label naming the SandboxSet that
	// created it. Written by selector (pool.go); read by selector and
	// statusagg to find a set's members (with the controller reference and
	// LabelSandboxClaimed: upgrade.PoolOf).
	LabelSandboxPool = Prefix + "sandbox-pool"

	// LabelSandboxTemplate is the Sandbox label naming the SandboxSet
	// template it was built from; the guides select sandboxes by it. Written
	// by users and by selector on pool members; read by users' ops
	// selectors.
	LabelSandboxTemplate = Prefix + "sandbox-template"

	// LabelTemplateHash is the Sandbox label holding the SandboxSet
	// revision it was created from. Written by selector on pool members;
	// read by selector (the rolling update replaces the others) and
	// statusagg (updatedReplicas).
	LabelTemplateHash = Prefix + "template-hash"

	// LabelPodTemplateHash (no prefix) is the Pod label holding the
	// sandbox revision (status.updateRevision) the pod was built from.
	// Written by podcycler; read by hookrunner and statusagg to tell the
	// new pod from the old.
	LabelPodTemplateHash = "pod-template-hash"

	// AnnotationRuntimeURL is the Sandbox annotation overriding the
	// agent-runtime base URL (default http://<podIP>:49983). Written by
	// users or test harnesses; read by hookrunner.
	AnnotationRuntimeURL = Prefix + "runtime-url"

	// AnnotationRuntimeAccessToken is the Sandbox annotation holding the
	// token hookrunner sends as X-Access-Token to the agent-runtime.
	// Written by whoever creates the sandbox; read by hookrunner.
	AnnotationRuntimeAccessToken = Prefix + "runtime-access-token"
)

// FinalizerSandboxUpdateOpsProtection is the finalizer selector puts on
// every SandboxUpdateOps, and removes once the ops' label and
// resume-trigger annotation are gone from the sandboxes it claimed.
const FinalizerSandboxUpdateOpsProtection = Prefix + "sandboxupdateops-protection"

// FinalizerSandboxSetProtection is the finalizer selector puts on every
// SandboxSet, and removes once the set is deleted and no sandbox labelled
// claimed still carries its owner reference: the garbage collector would
// delete such a sandbox with the pool.
const FinalizerSandboxSetProtection = Prefix + "sandboxset-protection"

// Sandbox condition types. Written by statusagg; read by users, selector
// and the other services' idempotency checks.
const (
	// ConditionReady says whether the sandbox serves requests. Reasons:
	// ReadyReasonPodReady, ReadyReasonUpgrading, ReadyReasonPodCreateFailed.
	ConditionReady = "Ready"

	// ConditionUpgrading says which stage of an upgrade the sandbox is in,
	// or how the upgrade ended. Its status is False for every reason but
	// UpgradingReasonSucceeded (see UpgradingConditionStatus).
	ConditionUpgrading = "Upgrading"

	// ConditionSandboxPaused is True while the sandbox's pod is stopped
	// for a pause.
	ConditionSandboxPaused = "SandboxPaused"
)

// Reasons of the Ready condition.
const (
	// ReadyReasonPodReady: the pod is ready (Ready=True).
	ReadyReasonPodReady = "PodReady"
	// ReadyReasonUpgrading: the sandbox is being upgraded (Ready=False,
	// message ReadyMessageUpgrading).
	ReadyReasonUpgrading = "Upgrading"
	// ReadyReasonPodCreateFailed: the pod could not be created.
	ReadyReasonPodCreateFailed = "PodCreateFailed"

	// ReadyMessageUpgrading is the Ready condition's message while the
	// sandbox is upgrading.
	ReadyMessageUpgrading = "sandbox is upgrading"
)

// Reasons of the Upgrading condition, in the order an upgrade passes them.
// A "...Failed" reason leaves the sandbox in phase Upgrading; a later ops
// resumes it from the failed stage.
const (
	// UpgradingReasonResuming: a paused sandbox is being woken with its old
	// template before the upgrade.
	UpgradingReasonResuming = "Resuming"
	// UpgradingReasonResumeSucceed: the paused sandbox is awake.
	UpgradingReasonResumeSucceed = "ResumeSucceed"
	// UpgradingReasonPreUpgrade: the preUpgrade hook runs in the old pod.
	UpgradingReasonPreUpgrade = "PreUpgrade"
	// UpgradingReasonPreUpgradeFailed: the preUpgrade hook failed; the old
	// pod is untouched.
	UpgradingReasonPreUpgradeFailed = "PreUpgradeFailed"
	// UpgradingReasonCheckpointing: a Checkpoint of the old pod is being
	// taken (CheckpointRestore only).
	UpgradingReasonCheckpointing = "Checkpointing"
	// UpgradingReasonCheckpointFailed: the Checkpoint failed.
	UpgradingReasonCheckpointFailed = "CheckpointFailed"
	// UpgradingReasonUpgradePod: the old pod is replaced by one built from
	// the patched template, and waited for until ready.
	UpgradingReasonUpgradePod = "UpgradePod"
	// UpgradingReasonUpgradePodFailed: the new pod did not become ready;
	// the message names the container and its reason.
	UpgradingReasonUpgradePodFailed = "UpgradePodFailed"
	// UpgradingReasonPostUpgrade: the postUpgrade hook runs in the new pod.
	UpgradingReasonPostUpgrade = "PostUpgrade"
	// UpgradingReasonPostUpgradeFailed: the postUpgrade hook failed.
	UpgradingReasonPostUpgradeFailed = "PostUpgradeFailed"
	// UpgradingReasonSucceeded: the upgrade finished (Upgrading=True).
	UpgradingReasonSucceeded = "Succeeded"
)

// SandboxUpdateOps condition types. Written by statusagg, which owns the
// ops' status, from what selector decided; read by users.
const (
	// ConditionProgressing says whether the ops is still upgrading
	// sandboxes, and why it stopped when it did.
	ConditionProgressing = "Progressing"

	// ConditionFailureBudgetExhausted is True when failed sandboxes have
	// used up maxUnavailable and nothing is upgrading; its message names
	// the failed sandboxes and how many were not started.
	ConditionFailureBudgetExhausted = "FailureBudgetExhausted"

	// ConditionWaitingForNamespace is True while the ops waits in Pending
	// for another active ops of the namespace, which its message names.
	ConditionWaitingForNamespace = "WaitingForNamespace"
)

// MaxConditionMessageLength caps condition messages; longer ones (hook
// output, container errors) are cut to this many bytes.
const MaxConditionMessageLength = 1024
