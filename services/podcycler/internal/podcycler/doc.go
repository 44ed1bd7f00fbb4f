// Package podcycler is the only writer of sandbox Pods.
//
// Two paths share one controller loop keyed by sandbox (namespace/name), fed by a Sandbox
// informer and a Pod informer (pods labelled pod-template-hash, mapped to the Sandbox that
// controls them):
//
//   - Lifecycle (sync): a Sandbox with spec.template, not paused and not being deleted, gets
//     a Pod of its name built from the template (labels plus pod-template-hash, annotations,
//     a controller reference), or, while spec.template carries a patch whose preUpgrade
//     has not backed the workspace up, from the template kept from before it
//     (upgrade.PodTemplate). A pod is created only when none of that name exists; a
//     template change alone never recreates a running pod. spec.paused deletes the pod with a
//     UID precondition; unpausing creates it again. A deleted Sandbox's pod is removed by the
//     garbage collector.
//   - Upgrade (handlePreHookDone, on prehook-done from the podcycler consumer): delete the
//     old pod by UID, wait until its name is free, create the pod of the target revision
//     carrying molt.dev/attempt and molt.dev/ops, publish stage-started UpgradePod, ack. The
//     wait for Ready is finished from the Pod informer (watchUpgradedPod): Ready publishes
//     pod-ready, a failed container or --pod-ready-timeout publishes failed
//     (UpgradePodFailed), only for the attempt the sandbox's status describes. No worker
//     blocks while a pod starts.
//   - CheckpointRestore (checkpoint, restore.go): before the old pod is deleted, the new
//     pod's workspace is settled: a checkpoint of the old pod, or one kept from the failed
//     attempt being continued; the new pod restores it (molt.dev/restore-from). A
//     sandbox's checkpoints are deleted when its attempt Succeeded, never after a failure.
//
// One upgrade creates one pod: while the handler replaces a pod, the lifecycle path leaves a
// missing pod alone (inFlight in this process; the PreUpgrade, Checkpointing and PostUpgrade
// stages in status), and a pod of the target revision that another writer created is adopted
// rather than replaced.
package podcycler
