package devruntime

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"

	processpb "molt.dev/pkg/agentruntime/gen/process"
	"molt.dev/pkg/agentruntime/gen/process/processconnect"
)

// DefaultKeepalive is how often a running command's stream carries a
// keepalive event.
const DefaultKeepalive = 5 * time.Second

// authorizationRoot is HTTP basic auth for user root: the only user here.
const authorizationRoot = "Basic cm9vdDo="

// Target is what one listener serves.
type Target struct {
	// View is where commands run.
	View View
	// AccessToken returns the X-Access-Token every request must carry. It
	// is asked on every request (the sandbox's annotation may change); when
	// it returns "" (no token set) every request is refused. Nil turns the
	// check off: only for tests of the protocol alone, never in Serve.
	AccessToken func() string
	// Keepalive is the keepalive period; zero means DefaultKeepalive.
	Keepalive time.Duration
}

// headerAccessToken carries the sandbox's access token, as in envd.
const headerAccessToken = "X-Access-Token"

// NewHandler returns the path and handler of process.Process for target.
// Serve it over HTTP/2 without TLS (see NewServer).
func NewHandler(target Target) (string, http.Handler) {
	if target.Keepalive <= 0 {
		target.Keepalive = DefaultKeepalive
	}
	path, h := processconnect.NewProcessHandler(&processServer{target: target})
	if target.AccessToken == nil {
		return path, h
	}
	return path, requireToken(target.AccessToken, h)
}

// requireToken refuses, with HTTP 401 as envd does (code Unauthenticated
// to a Connect or gRPC client), every request whose X-Access-Token is not
// token(): a missing or wrong one, and any when token() is "".
func requireToken(token func() string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := token()
		if want == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get(headerAccessToken)), []byte(want)) != 1 {
			http.Error(w, "invalid access token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// NewServer returns an HTTP server of target's handler speaking HTTP/1.1
// and HTTP/2 without TLS (h2c), as the agent-runtime does.
func NewServer(target Target) *http.Server {
	mux := http.NewServeMux()
	mux.Handle(NewHandler(target))
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{Handler: mux, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}
}

type processServer struct {
	processconnect.UnimplementedProcessHandler
	target Target
}

// Start checks the caller, starts the command and streams its events: start,
// data and keepalives as they come, then one end. When the caller goes away
// the command is killed.
func (s *processServer) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	if err := s.authorize(req.Header()); err != nil {
		return err
	}
	msg := req.Msg
	if msg.Pty != nil {
		return connect.NewError(connect.CodeUnimplemented, errors.New("the development agent-runtime has no pty"))
	}
	cfg := msg.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is empty"))
	}
	cmd, err := startCommand(s.target.View, append([]string{cfg.GetCmd()}, cfg.GetArgs()...), cfg.GetEnvs(), cfg.GetCwd())
	if err != nil {
		text := err.Error()
		return stream.Send(endEvent(&processpb.ProcessEvent_EndEvent{ExitCode: -1, Status: "error", Error: &text}))
	}
	return s.stream(ctx, cmd, stream)
}

// authorize refuses any user but root (the access token is checked before,
// by requireToken).
func (s *processServer) authorize(h http.Header) error {
	if auth := h.Get("Authorization"); auth != "" && auth != authorizationRoot {
		return connect.NewError(connect.CodePermissionDenied, errors.New("only user root is supported"))
	}
	return nil
}

// stream sends cmd's events until it ended and its output is drained. When
// it returns early (the caller went away) it kills the command.
func (s *processServer) stream(ctx context.Context, cmd *command, stream *connect.ServerStream[processpb.StartResponse]) error {
	stop := make(chan struct{})
	data := make(chan *processpb.ProcessEvent_DataEvent)
	var readers sync.WaitGroup
	readers.Add(2)
	go readChunks(cmd.stdout, data, stop, &readers, func(b []byte) *processpb.ProcessEvent_DataEvent {
		return &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
	})
	go readChunks(cmd.stderr, data, stop, &readers, func(b []byte) *processpb.ProcessEvent_DataEvent {
		return &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
	})
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	exited := make(chan struct{})
	go func() { _ = cmd.cmd.Wait(); close(exited) }()
	defer func() {
		close(stop)
		select {
		case <-exited:
		default:
			cmd.kill()
			<-exited
		}
		closeAll(cmd.stdout, cmd.stderr)
		<-drained
	}()

	if err := stream.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{
		Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: uint32(cmd.cmd.Process.Pid)}},
	}}); err != nil {
		return err
	}
	keepalive := time.NewTicker(s.target.Keepalive)
	defer keepalive.Stop()
	waitExit, waitOutput := exited, drained
	for waitExit != nil || waitOutput != nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d := <-data:
			if err := stream.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{
				Event: &processpb.ProcessEvent_Data{Data: d},
			}}); err != nil {
				return err
			}
		case <-waitExit:
			waitExit = nil
			// A process the command left behind may hold the pipes open.
			deadline := time.Now().Add(drainGrace)
			_ = cmd.stdout.SetReadDeadline(deadline)
			_ = cmd.stderr.SetReadDeadline(deadline)
		case <-waitOutput:
			waitOutput = nil
		case <-keepalive.C:
			if err := stream.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{
				Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}},
			}}); err != nil {
				return err
			}
		}
	}
	code, ok, status := exitOf(cmd.cmd.ProcessState)
	return stream.Send(endEvent(&processpb.ProcessEvent_EndEvent{ExitCode: code, Exited: ok, Status: status}))
}

func endEvent(end *processpb.ProcessEvent_EndEvent) *processpb.StartResponse {
	return &processpb.StartResponse{Event: &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}}}
}

// readChunks sends what it reads from f as data events until EOF, an error,
// the read deadline or stop.
func readChunks(f *os.File, data chan<- *processpb.ProcessEvent_DataEvent, stop <-chan struct{}, wg *sync.WaitGroup, wrap func([]byte) *processpb.ProcessEvent_DataEvent) {
	defer wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			select {
			case data <- wrap(append([]byte(nil), buf[:n]...)):
			case <-stop:
				return
			}
		}
		if err != nil {
			return
		}
	}
}
