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
	"unicode/utf8"

	"connectrpc.com/connect"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
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
	return errorPrefix + err.Error()
}

// ErrorMessageWithOutput is ErrorMessage followed by what the hook printed
// before the call failed (partial: the Result Exec returned with the error),
// as FailureMessage writes it: a hook that timed out, or whose connection
// was lost for good, still says what it was doing. Without any output it is
// ErrorMessage.
func ErrorMessageWithOutput(err error, partial Result) string {
	if strings.TrimSpace(partial.Stderr) == "" && strings.TrimSpace(partial.Stdout) == "" {
		return ErrorMessage(err)
	}
	return withOutput(ErrorMessage(err), partial.Stderr, partial.Stdout)
}

const (
	errorPrefix  = "hook execution error: "
	failedPrefix = "hook failed with exit code "
	stderrLabel  = ", stderr: "
	stdoutLabel  = ", stdout: "
	// cutMark starts a stream's tail that was cut to fit.
	cutMark = "…"
)

// withOutput is head followed by the stderr and stdout tails, the whole
// within the condition message's limit (MaxConditionMessageLength), so that
// nothing later cuts it: each stream keeps its last bytes, where a failing
// command says why, and stderr gets at least three quarters of the room.
func withOutput(head, stderr, stdout string) string {
	// Invalid UTF-8 becomes U+FFFD (3 bytes a byte) when the message is
	// stored as a string: done first, the room below is sized on what is
	// kept, and the end of the output survives the condition's limit.
	stderr, stdout = strings.ToValidUTF8(strings.TrimSpace(stderr), "\uFFFD"), strings.ToValidUTF8(strings.TrimSpace(stdout), "\uFFFD")
	head = strings.ToValidUTF8(head, "\uFFFD")
	// A long cause keeps half the room: the labels and the output's ends
	// stay readable.
	head = agentsv1alpha1.TruncateConditionMessageTo(head, agentsv1alpha1.MaxConditionMessageLength/2)
	room := max(0, agentsv1alpha1.MaxConditionMessageLength-len(head)-len(stderrLabel)-len(stdoutLabel))
	outRoom := min(len(stdout), room/4)
	errRoom := min(len(stderr), room-outRoom)
	outRoom = min(len(stdout), room-errRoom)
	return head + stderrLabel + lastBytes(stderr, errRoom) + stdoutLabel + lastBytes(stdout, outRoom)
}

// lastBytes is at most n bytes of s: all of it, or cutMark and its end,
// cut at a character's start.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= len(cutMark) {
		return ""
	}
	cut := len(s) - (n - len(cutMark))
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return cutMark + s[cut:]
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
// run it and said why in the end event. The tails are cut (from the front,
// marked "…") so that the message fits a condition's (withOutput).
func (r Result) FailureMessage() string {
	switch {
	case r.Succeeded():
		return ""
	case !r.Exited && r.Error != "":
		return ErrorMessage(errors.New(r.Error))
	case r.ExitCode == 0 && r.Error != "":
		// Exited 0 but the runtime reported an error: its words are the cause.
		return withOutput(failedPrefix+"0 and the agent-runtime's error "+strconv.Quote(r.Error), r.Stderr, r.Stdout)
	default:
		return withOutput(failedPrefix+strconv.Itoa(int(r.ExitCode)), r.Stderr, r.Stdout)
	}
}

// SuccessNote is the note on a hook that succeeded but wrote to stderr
// ("" when it wrote nothing there): a script whose last command succeeds
// exits 0 even when a command before it failed (a backup's tar that found
// no directory), and its stderr is the only word of it. hook names the hook
// (preUpgrade, postUpgrade). Its tail is cut to fit a condition's message.
func (r Result) SuccessNote(hook string) string {
	stderr := strings.ToValidUTF8(strings.TrimSpace(r.Stderr), "\uFFFD")
	if !r.Succeeded() || stderr == "" {
		return ""
	}
	head := hook + " exited 0 but wrote to stderr (a command before its last may have failed: check what it backs up or restores): "
	return head + lastBytes(stderr, max(0, agentsv1alpha1.MaxConditionMessageLength/2-len(head)))
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

// HookExited reports whether message is the failure of a hook that ran and
// exited non-zero (FailureMessage's words), not one the agent-runtime could
// not run or see to its end.
func HookExited(message string) bool {
	return strings.HasPrefix(message, failedPrefix)
}

// HookCause is what a hook error message written by ErrorMessageWithOutput says
// went wrong, before its output ("timed out after 3 seconds"); "" for any other
// message (a hook that exited says its exit code in its own field).
func HookCause(message string) string {
	rest, ok := strings.CutPrefix(message, errorPrefix)
	if !ok {
		return ""
	}
	if i := strings.Index(rest, stderrLabel); i >= 0 {
		rest = rest[:i]
	}
	return strings.TrimSpace(rest)
}

// HookOutput splits a condition message written by FailureMessage or
// ErrorMessageWithOutput back into the stderr and stdout tails (ok false for
// any other message). kubectl molt shows the stderr tail of a failed hook
// this way.
func HookOutput(message string) (stderr, stdout string, ok bool) {
	const pre, mid = stderrLabel, stdoutLabel
	if !strings.HasPrefix(message, failedPrefix) && !strings.HasPrefix(message, errorPrefix) {
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
