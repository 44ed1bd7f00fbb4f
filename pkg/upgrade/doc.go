// Package upgrade holds the small pieces of the upgrade contract that more
// than one service reads: which attempt a sandbox's status describes, where a
// sandbox stands for a given ops, and the revision hash of a pod template.
// docs/pipeline.md describes the whole contract.
package upgrade
