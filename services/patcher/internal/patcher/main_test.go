package patcher

import (
	"testing"

	"molt.dev/dev/testenv"
)

// The tests of this package that write through the API server use the
// harness's real control plane and NATS (testenv); the others need neither.
func TestMain(m *testing.M) { testenv.Main(m) }
