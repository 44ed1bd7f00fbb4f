// Package patcher is molt's patcher service: the only writer of a sandbox's
// spec during an upgrade (docs/pipeline.md).
//
// It consumes `requested` (consumer patcher). For each, it loads the sandbox
// and its ops from the API server (a lagging cache must not drop a fresh
// admission), and skips a redelivery whose attempt is already past
// PreUpgrade. It applies the ops's Strategic Merge Patch to
// spec.template and copies the ops's lifecycle hooks, in one Update against
// the resourceVersion it read (spec.upgradePolicy is left as the user set
// it). For an attempt that resumes none, the same update keeps the template
// it replaces (upgrade.AnnotationOriginalTemplate): until preUpgrade has
// backed up the pod that runs it, podcycler builds any pod it makes outside
// UpgradePod from that copy. A paused sandbox the ops woke is patched only
// once its old pod is Ready (it reports ResumeSucceed). Then it publishes
// `patched` (hookrunner runs preUpgrade next), or, when the attempt resumes
// at PostUpgrade on a pod already rebuilt, `pod-ready`.
//
// A patch that cannot be applied to this sandbox's own template is filed as
// PreUpgradeFailed (a `failed` event), before the pod is touched; so is a
// spec write the API server refuses for good (an admission policy, RBAC,
// validation; upgrade.Refusal), at once and in the server's words, once a
// fresh read shows the sandbox still as read (a failed test of the write's
// JSON patch is Invalid too, and is retried). For a
// CheckpointRestore ops it marks the attempt's strategy on the sandbox
// (upgrade.AnnotationUpgradeStrategy), in the same update; one whose patch
// changes an image (refused at apply by CEL) fails with CheckpointFailed.
package patcher
