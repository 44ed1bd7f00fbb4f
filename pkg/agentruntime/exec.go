package agentruntime

import (
	"context"
	"crypto/tls"
	"errors"
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
	// Stdout and Stderr, when set, get all of the command's output as it
	// arrives (the Result keeps only the tails).
	Stdout, Stderr io.Writer
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
// (see ErrorMessage and the Err* kinds).
func Exec(ctx context.Context, req ExecRequest) (Result, error) {
	if len(req.Command) == 0 {
		return Result{}, errors.New("no command to run")
	}
	callCtx, cancel := ctx, context.CancelFunc(func() {})
	if req.Timeout > 0 {
		callCtx, cancel = context.WithTimeout(ctx, req.Timeout)
	}
	defer cancel()

	client := processconnect.NewProcessClient(httpClient(req.BaseURL), req.BaseURL, connect.WithGRPC())
	call := connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: req.Command[0], Args: req.Command[1:]},
	})
	if req.AccessToken != "" {
		call.Header().Set(headerAccessToken, req.AccessToken)
	}
	call.Header().Set(headerAuthorization, authorizationRoot)

	stream, err := client.Start(callCtx, call)
	if err != nil {
		return Result{}, classify(ctx, callCtx, err, req.BaseURL, req.Timeout)
	}
	defer stream.Close()
	stdout, stderr := newTail(OutputTail), newTail(OutputTail)
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
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
	if err := stream.Err(); err != nil {
		return Result{}, classify(ctx, callCtx, err, req.BaseURL, req.Timeout)
	}
	return Result{}, &execError{kind: ErrNoEndEvent, msg: ErrNoEndEvent.Error()}
}
