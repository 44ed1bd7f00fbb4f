// Package patcher is molt's patcher service: the only writer of a sandbox's
// spec during an upgrade (docs/pipeline.md).
//
// It consumes `requested` (consumer patcher). For each, it loads the sandbox
// and its ops from the API server (a lagging cache must not drop a fresh
// admission), and skips a redelivery whose attempt is already past
// PreUpgrade. It applies the ops's Strategic Merge Patch to
// spec.template, merges the ops's lifecycle hooks, and sets
// spec.upgradePolicy for the attempt (cleared again on success unless the
// user had set it), in one Update against the resourceVersion it read. Then
// it publishes `patched` (hookrunner runs preUpgrade next), or, when the
// attempt resumes at PostUpgrade on a pod already rebuilt, `pod-ready`.
//
// A patch that cannot be applied to this sandbox's own template is filed as
// PreUpgradeFailed (a `failed` event), before the pod is touched; a
// CheckpointRestore ops is refused per sandbox with CheckpointFailed.
package patcher
