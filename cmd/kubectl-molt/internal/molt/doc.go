// Package molt is the kubectl molt plugin: one view of an upgrade for the
// operator who runs it. status watches a SandboxUpdateOps live, history
// reads one sandbox's events from JetStream, plan previews an ops without
// changing anything, retry and abort are the user guides' recovery flows
// made one command each.
//
// It ships to users, so it links pkg (the API types, the clientset, the
// selection and patch logic of pkg/upgrade, the event catalogue of
// pkg/events) and nothing of the dev module. Selection, patching and the
// stage order are asked of pkg/upgrade, never re-implemented here, so what
// plan shows cannot drift from what the selector does.
package molt
