package agentruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// TestClassifyConnectionErrors: how a call's transport failures read. A
// runtime that is not there yet, or says it is unavailable, is retried as
// unreachable; one whose connection breaks mid-call is a lost connection
// (a tagged call may follow the run); a token refusal is neither.
func TestClassifyConnectionErrors(t *testing.T) {
	const url = "http://127.100.0.9:49983"
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, ErrUnreachable},
		{"503 from a runtime that is not this pod's", connect.NewError(connect.CodeUnavailable, errors.New("HTTP status 503 Service Unavailable")), ErrUnreachable},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, ErrConnectionLost},
		{"broken pipe", fmt.Errorf("Post %q: %w", url, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}), ErrConnectionLost},
		{"cut mid-message", connect.NewError(connect.CodeInternal, fmt.Errorf("protocol error: incomplete envelope: %w", io.ErrUnexpectedEOF)), ErrConnectionLost},
		// What connect makes of a connection closed under a call (seen when the reset
		// reaches the client as an end of stream).
		{"cut, reported as unavailable", connect.NewError(connect.CodeUnavailable, io.ErrUnexpectedEOF), ErrConnectionLost},
		{"token refused", connect.NewError(connect.CodeUnauthenticated, errors.New("invalid access token")), ErrUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classify(context.Background(), context.Background(), tc.err, url, time.Minute)
			for _, kind := range []error{ErrUnreachable, ErrConnectionLost, ErrUnauthenticated, ErrTimeout} {
				if is := errors.Is(got, kind); is != (kind == tc.want) {
					t.Errorf("classify(%v) = %v: errors.Is(%v) = %v", tc.err, got, kind, is)
				}
			}
		})
	}
	// A clean end of stream is not a lost connection.
	if got := classify(context.Background(), context.Background(), connect.NewError(connect.CodeUnknown, io.EOF), url, time.Minute); errors.Is(got, ErrConnectionLost) {
		t.Errorf("classify(EOF) = %v, want no lost connection", got)
	}
}
