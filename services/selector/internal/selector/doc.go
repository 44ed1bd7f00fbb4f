// Package selector is molt's admission service: it decides which sandboxes
// enter a SandboxUpdateOps upgrade, and when (docs/pipeline.md, API.md
// "Behaviour").
//
// Three controllers. The first, keyed by ops ("namespace/name"), reads
// SandboxUpdateOps and Sandboxes from one shared informer factory; any change
// to a sandbox or an
// ops enqueues every ops of its namespace, so pacing reacts to status that
// statusagg writes and a waiting ops starts when the active one ends. Per
// ops it keeps the protection finalizer, applies upgrade.Select within the
// namespace's one active ops, and admits up to maxUnavailable minus
// (updating + failed) not-started candidates in name order: it labels each
// `agents.kruise.io/update-ops=<ops>` against the resourceVersion it decided
// on, then publishes `requested` (attempt = ops UID). It keeps
// `agents.kruise.io/upgrade-failed` in step with failed attempts and, when the
// ops is deleted, removes its label and the resume-trigger annotation from
// its sandboxes before the finalizer. It never writes status.
//
// The second, keyed by sandbox, upgrades a sandbox with spec.upgradePolicy
// whose template changed without an ops (a direct upgrade, attempt
// upgrade.DirectAttemptPrefix + revision), over a second factory that watches
// only the pods molt built. The third, keyed by SandboxSet, keeps each warm
// pool's members (pool.go): it creates, replaces and deletes them; statusagg
// writes the set's status.
//
// Recovery: the label is the durable truth. An admitted sandbox whose status
// does not show the attempt gets `requested` again on the first sync after a
// restart and then every --republish-after; the deterministic message id lets
// the stream drop copies inside its duplicate window.
//
// Replicas elect one admitting leader through the Lease molt-selector
// (--leader-elect, --leader-election-namespace); only the leader watches.
package selector
