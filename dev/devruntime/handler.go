package devruntime

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"syscall"
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
	// Stale, when set, is asked on every request, before the token: true
	// says this runtime's pod no longer holds the address it listens on
	// (it is terminating, or the address went to another pod, which this
	// process has not seen yet), and the request is answered 503 (code
	// Unavailable, which a caller retries as unreachable). A call for the
	// address's new pod must not run in, or be refused by, the old one: a
	// real pod's runtime goes with its network namespace.
	Stale func() bool
	// Keepalive is the keepalive period; zero means DefaultKeepalive.
	Keepalive time.Duration
	// Retention is how long a tagged process's events are kept after its
	// end; zero means DefaultRetention.
	Retention time.Duration
	// Stopped, when closed, kills every process still running: the pod is
	// gone. Nil never kills them.
	Stopped <-chan struct{}
}

// headerAccessToken carries the sandbox's access token, as in envd.
const headerAccessToken = "X-Access-Token"

// NewHandler returns the path and handler of process.Process for target.
// Serve it over HTTP/2 without TLS (see NewServer).
func NewHandler(target Target) (string, http.Handler) {
	if target.Keepalive <= 0 {
		target.Keepalive = DefaultKeepalive
	}
	srv := &processServer{target: target, procs: newProcesses(target.Retention)}
	if target.Stopped != nil {
		go func() { <-target.Stopped; srv.procs.killAll() }()
	}
	path, h := processconnect.NewProcessHandler(srv)
	if target.AccessToken == nil {
		return path, h
	}
	return path, requireToken(target.AccessToken, target.Stale, h)
}

// requireToken answers 503 while stale (may be nil) says the address is no
// longer this pod's, and refuses, with HTTP 401 as envd does (code
// Unauthenticated to a Connect or gRPC client), every request whose
// X-Access-Token is not token(): a missing or wrong one, and any when
// token() is "".
func requireToken(token func() string, stale func() bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stale != nil && stale() {
			http.Error(w, "this address no longer belongs to the pod this runtime serves", http.StatusServiceUnavailable)
			return
		}
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
	procs  *processes
}

// Start checks the caller, starts the command and streams its events: start,
// data and keepalives as they come, then one end. An untagged command is
// killed when its caller goes away; a tagged one keeps running, and its
// events stay for Connect until Retention after its end (a second Start
// with the same tag is refused with AlreadyExists).
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
	tag := msg.GetTag()
	if err := s.procs.reserve(tag); err != nil {
		return connect.NewError(connect.CodeAlreadyExists, err)
	}
	cmd, err := startCommand(s.target.View, append([]string{cfg.GetCmd()}, cfg.GetArgs()...), cfg.GetEnvs(), cfg.GetCwd())
	if err != nil {
		s.procs.release(tag)
		text := err.Error()
		return stream.Send(&processpb.StartResponse{Event: endEvent(&processpb.ProcessEvent_EndEvent{ExitCode: -1, Status: "error", Error: &text})})
	}
	p := newProcess(cmd, tag)
	s.procs.add(p)
	send := func(ev *processpb.ProcessEvent) error { return stream.Send(&processpb.StartResponse{Event: ev}) }
	if tag != "" {
		return s.follow(ctx, p, send)
	}
	defer s.procs.forget(p)
	err = s.follow(ctx, p, send)
	if err != nil {
		// The caller went away before the end: an untagged command
		// dies with its call.
		_ = p.signal(os.Kill)
	}
	return err
}

// Connect streams the events of a process started before (by pid or tag):
// everything it has said that is kept, then the rest until its end.
func (s *processServer) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	if err := s.authorize(req.Header()); err != nil {
		return err
	}
	p := s.procs.find(req.Msg.GetProcess())
	if p == nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("no process %s", describeSelector(req.Msg.GetProcess())))
	}
	return s.follow(ctx, p, func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.ConnectResponse{Event: ev})
	})
}

// SendSignal sends SIGTERM or SIGKILL to a running process.
func (s *processServer) SendSignal(_ context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	if err := s.authorize(req.Header()); err != nil {
		return nil, err
	}
	var sig os.Signal
	switch req.Msg.GetSignal() {
	case processpb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case processpb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %v is not SIGTERM or SIGKILL", req.Msg.GetSignal()))
	}
	p := s.procs.find(req.Msg.GetProcess())
	if p == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no process %s", describeSelector(req.Msg.GetProcess())))
	}
	if err := p.signal(sig); err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("signal process %s: %w", describeSelector(req.Msg.GetProcess()), err))
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

func describeSelector(sel *processpb.ProcessSelector) string {
	if tag := sel.GetTag(); tag != "" {
		return fmt.Sprintf("tagged %q", tag)
	}
	return fmt.Sprintf("with pid %d", sel.GetPid())
}

// authorize refuses any user but root (the access token is checked before,
// by requireToken).
func (s *processServer) authorize(h http.Header) error {
	if auth := h.Get("Authorization"); auth != "" && auth != authorizationRoot {
		return connect.NewError(connect.CodePermissionDenied, errors.New("only user root is supported"))
	}
	return nil
}

// follow sends p's events from its start, with a keepalive every period of
// silence, until the end event is sent; it returns early with an error when
// ctx ends or a send fails.
func (s *processServer) follow(ctx context.Context, p *process, send func(*processpb.ProcessEvent) error) error {
	keepalive := time.NewTicker(s.target.Keepalive)
	defer keepalive.Stop()
	pos := 0
	for {
		evs, next, changed := p.next(pos)
		pos = next
		for _, ev := range evs {
			if err := send(ev); err != nil {
				return err
			}
			if ev.GetEnd() != nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-keepalive.C:
			if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		}
	}
}

func endEvent(end *processpb.ProcessEvent_EndEvent) *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}}
}
