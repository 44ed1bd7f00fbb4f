// Package hookrunner is molt's hookrunner service: it runs a sandbox's
// lifecycle hooks inside the sandbox, through its agent-runtime (the envd
// process protocol, pkg/agentruntime), between the pipeline's stages
// (docs/pipeline.md).
//
// It consumes `patched` (run preUpgrade on the old pod, then publish
// `prehook-done`) and `pod-ready` (run postUpgrade on the new pod, then
// publish `posthook-done`). Each hook runs only on the pod the attempt's
// durable marks name: preUpgrade never on a pod the same attempt built,
// postUpgrade only on it. A hook run carries a tag of its attempt and stage,
// so a hookrunner that restarts mid-hook follows the run already going
// instead of starting it again; a hook that succeeded marks the pod, and a
// redelivery skips it. A non-zero exit, a timeout or an unreachable runtime
// publishes `failed` with the exit code and the tails of stdout and stderr.
package hookrunner
