package service

import (
	"errors"
	"testing"
)

// Once the service is told to stop, /readyz says so, whatever the checks
// say: `make up` tells a service shutting down after a SIGTERM from one that
// runs, and starts it again once it is gone.
func TestReadyIsShuttingDownOnceToldToStop(t *testing.T) {
	stop := make(chan struct{})
	r := &Runtime{checks: map[string]func() error{"ok": func() error { return nil }}, stopping: stop}
	if err := r.Ready(); err != nil {
		t.Fatalf("Ready = %v before the stop, want nil", err)
	}
	close(stop)
	if err := r.Ready(); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("Ready = %v after the stop, want %v", err, ErrShuttingDown)
	}
}
