// Package e2e proves molt end to end: the five services run as the real
// binaries from bin/ (so they can be killed and restarted), against the
// harness's real control plane and in-process JetStream.
package e2e
