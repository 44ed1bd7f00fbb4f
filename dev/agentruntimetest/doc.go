// Package agentruntimetest tests pkg/agentruntime's client against the
// development agent-runtime (dev/devruntime). It holds only tests.
package agentruntimetest
