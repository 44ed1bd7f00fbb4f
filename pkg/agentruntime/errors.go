package agentruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
)

// The kinds of error Exec returns, matched with errors.Is. Every error
// Exec returns reads, after "hook execution error: ", as the cause a user
// sees; ErrorMessage adds that prefix.
var (
	// ErrTimeout: the call did not end within ExecRequest.Timeout
	// ("timed out after N seconds").
	ErrTimeout = errors.New("timed out")
	// ErrUnreachable: nothing answered at the base URL, or what answered
	// said it is unavailable (HTTP 503, code Unavailable) before the call
	// started anything ("agent-runtime at <url> is not reachable: <cause>").
	ErrUnreachable = errors.New("agent-runtime is not reachable")
	// ErrConnectionLost: the connection to the agent-runtime was reset,
	// broken or cut mid-message before the end event ("connection to the
	// agent-runtime at <url> was reset|lost: <cause>"), as when its pod
	// goes away during a call. Whether the command started is unknown; a
	// call with the same Tag follows that run if it did, so only tagged
	// calls retry it.
	ErrConnectionLost = errors.New("connection to the agent-runtime was lost")
	// ErrUnauthenticated: the agent-runtime refused X-Access-Token.
	ErrUnauthenticated = errors.New("agent-runtime rejected the access token")
	// ErrNoEndEvent: the stream closed cleanly before an end event.
	ErrNoEndEvent = errors.New("stream ended without an end event")
)

// execError is an error of a known kind with the text users read.
type execError struct {
	kind  error
	msg   string
	cause error
}

func (e *execError) Error() string { return e.msg }

func (e *execError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

// ErrorMessage is the condition message for a hook whose call failed:
// "hook execution error: <cause>".
func ErrorMessage(err error) string {
	return "hook execution error: " + err.Error()
}

// Succeeded reports whether the command exited with code 0.
func (r Result) Succeeded() bool {
	return r.Exited && r.ExitCode == 0 && r.Error == ""
}

// FailureMessage is the condition message for a hook that ran and did not
// succeed, "" when it succeeded:
//
//	hook failed with exit code N, stderr: <tail>, stdout: <tail>
//
// for a command that exited non-zero or was killed (a signal is a negative
// code), or "hook execution error: <error>" when the agent-runtime could not
// run it and said why in the end event.
func (r Result) FailureMessage() string {
	switch {
	case r.Succeeded():
		return ""
	case !r.Exited && r.Error != "":
		return ErrorMessage(errors.New(r.Error))
	default:
		return fmt.Sprintf("hook failed with exit code %d, stderr: %s, stdout: %s",
			r.ExitCode, strings.TrimSpace(r.Stderr), strings.TrimSpace(r.Stdout))
	}
}

// classify turns a failed call into the error Exec returns. callCtx is the
// context of the call (carrying timeout), parent the caller's.
func classify(parent, callCtx context.Context, err error, baseURL string, timeout time.Duration) error {
	var dial *net.OpError
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("call agent-runtime at %s: %w", baseURL, parent.Err())
	case errors.Is(callCtx.Err(), context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded:
		return &execError{kind: ErrTimeout, msg: "timed out after " + seconds(timeout) + " seconds", cause: err}
	case errors.As(err, &dial) && dial.Op == "dial":
		return &execError{kind: ErrUnreachable, msg: fmt.Sprintf("agent-runtime at %s is not reachable: %v", baseURL, dial), cause: err}
	// A connection cut mid-call is a loss whatever code connect gives it
	// (it reports an unexpected EOF from the transport as Unavailable), so
	// these come before the Unavailable case.
	case errors.Is(err, syscall.ECONNRESET):
		return &execError{kind: ErrConnectionLost, msg: fmt.Sprintf("connection to the agent-runtime at %s was reset: %v", baseURL, err), cause: err}
	case errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF):
		// Written to a connection the runtime had closed, or cut in the
		// middle of a message: the same loss as a reset.
		return &execError{kind: ErrConnectionLost, msg: fmt.Sprintf("connection to the agent-runtime at %s was lost: %v", baseURL, err), cause: err}
	case connect.CodeOf(err) == connect.CodeUnavailable:
		// Answered, but not as the runtime: one starting up, or a proxy with
		// no runtime behind it. A tagged call made again follows a run that
		// may have started.
		return &execError{kind: ErrUnreachable, msg: fmt.Sprintf("agent-runtime at %s is not reachable: %v", baseURL, err), cause: err}
	case connect.CodeOf(err) == connect.CodeUnauthenticated:
		return &execError{kind: ErrUnauthenticated, msg: ErrUnauthenticated.Error(), cause: err}
	default:
		return fmt.Errorf("call agent-runtime at %s: %w", baseURL, err)
	}
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// HookOutput splits a condition message written by FailureMessage back into
// the stderr and stdout tails (ok false for any other message). kubectl
// molt shows the stderr tail of a failed hook this way.
func HookOutput(message string) (stderr, stdout string, ok bool) {
	const pre, mid = ", stderr: ", ", stdout: "
	if !strings.HasPrefix(message, "hook failed with exit code ") {
		return "", "", false
	}
	i := strings.Index(message, pre)
	j := strings.LastIndex(message, mid)
	if i < 0 || j < i+len(pre)-1 {
		return "", "", false
	}
	if j < i+len(pre) {
		return "", strings.TrimSpace(message[j+len(mid):]), true
	}
	return strings.TrimSpace(message[i+len(pre) : j]), strings.TrimSpace(message[j+len(mid):]), true
}
