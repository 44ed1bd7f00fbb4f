package agentruntime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	processpb "molt.dev/pkg/agentruntime/gen/process"
	"molt.dev/pkg/agentruntime/gen/process/processconnect"
)

// OutputTail is how much of the end of stdout and of stderr a Result keeps.
const OutputTail = 4 << 10

const (
	headerAccessToken   = "X-Access-Token"
	headerAuthorization = "Authorization"
	// authorizationRoot is HTTP basic auth for user root, no password: the
	// hooks run as root.
	authorizationRoot = "Basic cm9vdDo="
)

// ExecRequest says what to run where.
type ExecRequest struct {
	// BaseURL is the agent-runtime's address (see BaseURL).
	BaseURL string
	// AccessToken is sent as X-Access-Token when not empty.
	AccessToken string
	// Command is the hook's exec.command: Command[0] is run with the rest
	// as its arguments.
	Command []string
	// Timeout bounds the whole call (the hook's timeoutSeconds); zero
	// leaves only ctx's deadline.
	Timeout time.Duration
	// Deadline, when set with a Timeout, ends the call sooner: a caller
	// that calls again to follow the same run (a lost connection) passes
	// the run's own deadline, so the run gets its Timeout once in all, not
	// once per call. The error still names Timeout, the hook's limit.
	Deadline time.Time
	// FollowDeadline, when set with a Tag, is when a run of the Tag that is
	// already on the agent-runtime (started by an earlier caller, say a
	// hookrunner that died) times out: its Timeout counts from its own
	// start, not from this call. It is followed until then, or for
	// followGrace when that is later (an ended run's result is still
	// read), then killed as a timeout. A run this call starts gets the
	// whole Timeout.
	FollowDeadline time.Time
	// Stdout and Stderr, when set, get all of the command's output as it
	// arrives (the Result keeps only the tails).
	Stdout, Stderr io.Writer
	// Tag, when set, names this run of the command on the agent-runtime so
	// that a later call with the same tag attaches to it rather than run
	// it again (see Exec).
	Tag string
}

// Result is how a command ended.
type Result struct {
	// ExitCode is the command's exit code, negative for a signal.
	ExitCode int32
	// Exited is false when the command was killed or never started.
	Exited bool
	// Status is the agent-runtime's description, e.g. "exit status 3".
	Status string
	// Error is what the agent-runtime reported went wrong, if anything.
	Error string
	// Stdout and Stderr are the last OutputTail bytes of each.
	Stdout, Stderr string
	// Reattached is true when the command was started by an earlier call
	// with the same tag and this one only followed it to its end.
	Reattached bool
	// streamed is true, for a call that failed, when it received anything of
	// the run first (a start, output, a keepalive): the command runs, or ran.
	streamed bool
}

// The HTTP clients of all calls: HTTP/2 over plain TCP (h2c) for http://
// base URLs, over TLS for https:// ones (a runtime-url behind a gateway);
// both ping idle connections so that those to pods that are gone drop.
var (
	h2c = &http.Client{Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		ReadIdleTimeout: 30 * time.Second,
		PingTimeout:     10 * time.Second,
	}}
	h2 = &http.Client{Transport: &http2.Transport{
		ReadIdleTimeout: 30 * time.Second,
		PingTimeout:     10 * time.Second,
	}}
)

func httpClient(baseURL string) *http.Client {
	if strings.HasPrefix(strings.ToLower(baseURL), "https://") {
		return h2
	}
	return h2c
}

// Exec runs req.Command through the agent-runtime at req.BaseURL and waits
// for its end event. A Result comes back whenever the command ran, whatever
// its exit code (see Result.FailureMessage); an error means the call
// itself failed, and reads as the cause in "hook execution error: <cause>"
// (see ErrorMessage and the Err* kinds). With an error, the Result holds
// only what the command printed before it (Stdout, Stderr), for
// ErrorMessageWithOutput.
//
// With a Tag, Exec first Connects to a process of that tag, running or
// ended, and starts the command only when there is none: a caller that
// died mid-command and calls again gets the first run's end instead of a
// second run. A tagged command outlives the call, so Exec kills it when
// req.Timeout passes, and whenever the call fails, after the run started, in
// a way no later call can follow it through (the stream cut with an internal
// error, closed without an end event): a run nobody follows would go on while its
// attempt is reported failed, and the attempt that resumes it would start
// the command again beside it (two backups writing one archive). It is left
// running when ctx ends first, when the connection was lost (the caller
// calls again and Connects to it), and when the call started nothing (not
// reachable, token refused).
func Exec(ctx context.Context, req ExecRequest) (Result, error) {
	if len(req.Command) == 0 {
		return Result{}, errors.New("no command to run")
	}
	callCtx, cancel := ctx, context.CancelFunc(func() {})
	if req.Timeout > 0 {
		end := time.Now().Add(req.Timeout)
		if !req.Deadline.IsZero() && req.Deadline.Before(end) {
			end = req.Deadline
		}
		callCtx, cancel = context.WithDeadline(ctx, end)
	}
	defer cancel()

	client := processconnect.NewProcessClient(httpClient(req.BaseURL), req.BaseURL, connect.WithGRPC())
	res, err := run(callCtx, client, req)
	if err == nil {
		return res, nil
	}
	partial := Result{Stdout: res.Stdout, Stderr: res.Stderr}
	var known *execError
	if !errors.As(err, &known) {
		err = classify(ctx, callCtx, err, req.BaseURL, req.Timeout)
	}
	// A timeout kills the run whatever this call saw of it (a silent command
	// sends nothing); another failure only a run this call saw start.
	if req.Tag != "" && ctx.Err() == nil && (errors.Is(err, ErrTimeout) || (res.streamed && !followable(err))) {
		if kerr := kill(ctx, client, req); kerr != nil {
			return partial, fmt.Errorf("%w; killing it failed, it may still run: %v", err, kerr)
		}
	}
	return partial, err
}

// Kill ends the run tagged req.Tag at the agent-runtime at req.BaseURL
// (SIGKILL), within killWait; nil when it is ended or there is none. A caller
// that gives up following a run (its connection lost again and again) ends
// it this way, so that it does not go on beside the attempt that resumes it.
func Kill(ctx context.Context, req ExecRequest) error {
	if req.Tag == "" {
		return errors.New("kill: no tag")
	}
	return kill(ctx, processconnect.NewProcessClient(httpClient(req.BaseURL), req.BaseURL, connect.WithGRPC()), req)
}

func kill(ctx context.Context, client processconnect.ProcessClient, req ExecRequest) error {
	killCtx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	call := connect.NewRequest(&processpb.SendSignalRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: req.Tag}},
		Signal:  processpb.Signal_SIGNAL_SIGKILL,
	})
	authorize(call.Header(), req.AccessToken)
	if _, err := client.SendSignal(killCtx, call); err != nil && connect.CodeOf(err) != connect.CodeNotFound && connect.CodeOf(err) != connect.CodeFailedPrecondition {
		return err
	}
	return nil
}

// followable reports whether a tagged run that Exec failed on is left running: a
// later call with the tag follows it (the connection was lost) or there is
// none (nothing answered, the token was refused). A timeout is not: its run
// is over its time.
func followable(err error) bool {
	return !errors.Is(err, ErrTimeout) &&
		(errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrUnreachable) || errors.Is(err, ErrUnauthenticated))
}

// killWait bounds the SendSignal that ends a tagged command Exec gave up on.
const killWait = 5 * time.Second

// run is one Exec call within ctx: Connect to req.Tag's process, else Start.
func run(ctx context.Context, client processconnect.ProcessClient, req ExecRequest) (Result, error) {
	if req.Tag != "" {
		followCtx, cancel := ctx, context.CancelFunc(func() {})
		if !req.FollowDeadline.IsZero() {
			end := req.FollowDeadline
			if least := time.Now().Add(followGrace); end.Before(least) {
				end = least
			}
			followCtx, cancel = context.WithDeadline(ctx, end)
		}
		res, err := connectTo(followCtx, client, req)
		cancel()
		switch connect.CodeOf(err) {
		case connect.CodeNotFound, connect.CodeUnimplemented:
			// Nothing to attach to (or a runtime without Connect): start it.
		default:
			return res, err
		}
	}
	call := connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: req.Command[0], Args: req.Command[1:]},
	})
	if req.Tag != "" {
		call.Msg.Tag = &req.Tag
	}
	authorize(call.Header(), req.AccessToken)
	stream, err := client.Start(ctx, call)
	if err != nil {
		return Result{}, err
	}
	res, err := collect(stream, req)
	if req.Tag != "" && connect.CodeOf(err) == connect.CodeAlreadyExists {
		// Another call started it in between: follow that one.
		return connectTo(ctx, client, req)
	}
	return res, err
}

// followGrace is how long a run already there is followed at least, past its
// FollowDeadline: enough to read the end of one that ended meanwhile.
const followGrace = 5 * time.Second

// connectTo follows the process tagged req.Tag to its end.
func connectTo(ctx context.Context, client processconnect.ProcessClient, req ExecRequest) (Result, error) {
	call := connect.NewRequest(&processpb.ConnectRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: req.Tag}},
	})
	authorize(call.Header(), req.AccessToken)
	stream, err := client.Connect(ctx, call)
	if err != nil {
		return Result{}, err
	}
	res, err := collect(stream, req)
	res.Reattached = err == nil
	return res, err
}

func authorize(h http.Header, token string) {
	if token != "" {
		h.Set(headerAccessToken, token)
	}
	h.Set(headerAuthorization, authorizationRoot)
}

// collect reads a Start or Connect stream to its end event.
func collect[T any, PT interface {
	*T
	GetEvent() *processpb.ProcessEvent
}](stream *connect.ServerStreamForClient[T], req ExecRequest) (Result, error) {
	defer stream.Close()
	stdout, stderr := newTail(OutputTail), newTail(OutputTail)
	streamed := false
	for stream.Receive() {
		streamed = true
		ev := PT(stream.Msg()).GetEvent()
		switch {
		case ev.GetData() != nil:
			out, errOut := ev.GetData().GetStdout(), ev.GetData().GetStderr()
			stdout.Write(out)
			stderr.Write(errOut)
			if req.Stdout != nil && len(out) > 0 {
				_, _ = req.Stdout.Write(out)
			}
			if req.Stderr != nil && len(errOut) > 0 {
				_, _ = req.Stderr.Write(errOut)
			}
		case ev.GetEnd() != nil:
			end := ev.GetEnd()
			return Result{
				ExitCode: end.GetExitCode(),
				Exited:   end.GetExited(),
				Status:   end.GetStatus(),
				Error:    end.GetError(),
				Stdout:   stdout.String(),
				Stderr:   stderr.String(),
			}, nil
		}
	}
	// No end event: what the command printed until then goes back with the
	// error (ErrorMessageWithOutput).
	partial := Result{Stdout: stdout.String(), Stderr: stderr.String(), streamed: streamed}
	if err := stream.Err(); err != nil {
		return partial, err
	}
	return partial, &execError{kind: ErrNoEndEvent, msg: ErrNoEndEvent.Error()}
}
