// Package integration proves statusagg against the real parts: it runs
// statusagg.Run in-process against testenv's control plane and JetStream,
// publishes real events and asserts on real objects, Events and /metrics.
package integration
