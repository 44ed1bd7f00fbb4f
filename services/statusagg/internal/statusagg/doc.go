// Package statusagg is molt's status aggregator: the only writer of the
// status of Sandbox and SandboxUpdateOps, of the Kubernetes Events about
// upgrades, and of the progress metrics. Everything it writes is recomputed
// from state, never incremented blindly.
//
// Three loops share one set of informers (Sandbox, SandboxUpdateOps, Pod):
//
//   - the sandbox loop (syncSandbox) recomputes a sandbox's status from its
//     spec, its pod and its upgrade record, and writes it only when it
//     changed;
//   - the event handler (handleEvent, durable consumer "statusagg" on molt.>)
//     moves a sandbox's upgrade record (conditions UpgradeAttempt and
//     Upgrading) forward, one attempt at a time and never backwards, and
//     records stage durations, failures and Kubernetes Events after the write;
//   - the ops loop (syncOps) recomputes an ops' counters and phase from
//     upgrade.Select over the namespace's sandboxes and freezes them once the
//     ops is Completed or Failed.
//
// docs/pipeline.md is the contract with the other services.
package statusagg
