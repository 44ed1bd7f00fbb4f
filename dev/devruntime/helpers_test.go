package devruntime_test

import (
	"net"
	"testing"

	"molt.dev/dev/devruntime"
)

// serve starts target's server on a free loopback port and returns its base
// URL.
func serve(t *testing.T, target devruntime.Target) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := devruntime.NewServer(target)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

// freePort returns a TCP port free on the loopback addresses.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
