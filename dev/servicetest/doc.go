// Package servicetest tests pkg/service's start-up frame against a real
// control plane and JetStream (dev/testenv). It holds only tests.
package servicetest
