package agentruntimetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"molt.dev/dev/devruntime"
	"molt.dev/pkg/agentruntime"
	processpb "molt.dev/pkg/agentruntime/gen/process"
	"molt.dev/pkg/agentruntime/gen/process/processconnect"
)

// The conformance of Exec against the development agent-runtime's process
// server (commands run on this host, no pod view) and against fake servers
// for what a correct server never does.

func TestMain(m *testing.M) {
	devruntime.MaybeRunInit()
	os.Exit(m.Run())
}

// serve starts h on a free loopback port, HTTP/2 without TLS, and returns
// its base URL.
func serve(t *testing.T, srv *http.Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

func devServer(t *testing.T, target devruntime.Target) string {
	t.Helper()
	return serve(t, devruntime.NewServer(target))
}

// fakeServer serves h as process.Process the way the agent-runtime does.
func fakeServer(t *testing.T, h processconnect.ProcessHandler, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	path, handler := processconnect.NewProcessHandler(h)
	if wrap != nil {
		handler = wrap(handler)
	}
	mux.Handle(path, handler)
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return serve(t, &http.Server{Handler: mux, Protocols: protocols})
}

func bash(script string) []string { return []string{"/bin/bash", "-c", script} }

func exec(t *testing.T, req agentruntime.ExecRequest) (agentruntime.Result, error) {
	t.Helper()
	if req.Timeout == 0 {
		req.Timeout = 30 * time.Second
	}
	return agentruntime.Exec(context.Background(), req)
}

func TestExecExitCodes(t *testing.T) {
	url := devServer(t, devruntime.Target{})
	for _, tc := range []struct {
		name    string
		script  string
		code    int32
		exited  bool
		status  string
		stdout  string
		stderr  string
		failure string
	}{
		{name: "success", script: "echo done", code: 0, exited: true, status: "exit status 0", stdout: "done\n"},
		{name: "exit 3", script: "echo partial; echo broken >&2; exit 3", code: 3, exited: true, status: "exit status 3",
			stdout: "partial\n", stderr: "broken\n", failure: "hook failed with exit code 3, stderr: broken, stdout: partial"},
		{name: "killed by SIGKILL", script: "echo before; kill -9 $$", code: -9, exited: false, status: "signal: killed",
			stdout: "before\n", failure: "hook failed with exit code -9, stderr: , stdout: before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := exec(t, agentruntime.ExecRequest{BaseURL: url, Command: bash(tc.script)})
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			want := agentruntime.Result{ExitCode: tc.code, Exited: tc.exited, Status: tc.status, Stdout: tc.stdout, Stderr: tc.stderr}
			if res != want {
				t.Errorf("result = %+v, want %+v", res, want)
			}
			if got := res.FailureMessage(); got != tc.failure {
				t.Errorf("FailureMessage() = %q, want %q", got, tc.failure)
			}
			if res.Succeeded() != (tc.failure == "") {
				t.Errorf("Succeeded() = %v", res.Succeeded())
			}
		})
	}
}

func TestExecSplitsCommandAndSendsHeaders(t *testing.T) {
	var got struct {
		path, contentType, auth, token string
		cmd                            string
		args                           []string
	}
	h := &fakeHandler{start: func(req *connect.Request[processpb.StartRequest], s *connect.ServerStream[processpb.StartResponse]) error {
		got.cmd, got.args = req.Msg.GetProcess().GetCmd(), req.Msg.GetProcess().GetArgs()
		return s.Send(end(&processpb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"}))
	}}
	url := fakeServer(t, h, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got.path, got.contentType = r.URL.Path, r.Header.Get("Content-Type")
			got.auth, got.token = r.Header.Get("Authorization"), r.Header.Get("X-Access-Token")
			next.ServeHTTP(w, r)
		})
	})
	if _, err := exec(t, agentruntime.ExecRequest{BaseURL: url, AccessToken: "tok", Command: []string{"/bin/bash", "-c", "echo a b"}}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if got.path != "/process.Process/Start" || !strings.HasPrefix(got.contentType, "application/grpc") {
		t.Errorf("called %s with content type %q, want /process.Process/Start over gRPC", got.path, got.contentType)
	}
	if got.auth != "Basic cm9vdDo=" || got.token != "tok" {
		t.Errorf("Authorization %q, X-Access-Token %q", got.auth, got.token)
	}
	if got.cmd != "/bin/bash" || strings.Join(got.args, "|") != "-c|echo a b" {
		t.Errorf("cmd %q args %q", got.cmd, got.args)
	}
}

func TestExecInterleavedOutputArrivesInOrder(t *testing.T) {
	url := devServer(t, devruntime.Target{})
	// The server reads the two pipes independently, so the order across them is
	// certain only if a write waits until the one before it has arrived: before
	// each write after the first, the script waits for a gate file that the test
	// creates once it has received the previous chunk.
	dir := t.TempDir()
	gate := func(n int) string { return filepath.Join(dir, "gate"+strconv.Itoa(n)) }
	wait := func(n int) string { return "until [ -e " + gate(n) + " ]; do sleep 0.01; done; " }
	script := "echo out1; " + wait(1) + "echo err1 >&2; " + wait(2) + "echo out2; " + wait(3) + "echo err2 >&2"
	client := processconnect.NewProcessClient(h2cClient(), url, connect.WithGRPC())
	// A server that held a chunk back would leave the script waiting at its gate.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := client.Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", script}},
	}))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var events []string
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			events = append(events, "start")
		case ev.GetData() != nil:
			d := ev.GetData()
			events = append(events, fmt.Sprintf("stdout:%s|stderr:%s", d.GetStdout(), d.GetStderr()))
			if err := os.WriteFile(gate(len(events)-1), nil, 0o644); err != nil { // events[0] is the start
				t.Fatal(err)
			}
		case ev.GetEnd() != nil:
			events = append(events, "end:"+strconv.Itoa(int(ev.GetEnd().GetExitCode())))
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v (received %q)", err, events)
	}
	want := []string{"start", "stdout:out1\n|stderr:", "stdout:|stderr:err1\n", "stdout:out2\n|stderr:", "stdout:|stderr:err2\n", "end:0"}
	if strings.Join(events, ",") != strings.Join(want, ",") {
		t.Errorf("events = %q, want %q", events, want)
	}

	// Every gate is open now: the script runs straight through.
	res, err := exec(t, agentruntime.ExecRequest{BaseURL: url, Command: bash(script)})
	if err != nil || res.Stdout != "out1\nout2\n" || res.Stderr != "err1\nerr2\n" {
		t.Errorf("Exec = %+v, %v", res, err)
	}
}

func TestExecKeepsTheTailOfLongOutput(t *testing.T) {
	url := devServer(t, devruntime.Target{})
	res, err := exec(t, agentruntime.ExecRequest{BaseURL: url, Command: bash(`head -c 10000 /dev/zero | tr '\0' a; echo -n END`)})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if len(res.Stdout) != agentruntime.OutputTail || !strings.HasSuffix(res.Stdout, "aaaEND") {
		t.Errorf("stdout has %d bytes ending %q, want the last %d", len(res.Stdout), res.Stdout[len(res.Stdout)-6:], agentruntime.OutputTail)
	}
}

func TestExecEndEventWithError(t *testing.T) {
	t.Run("development runtime: command not found", func(t *testing.T) {
		url := devServer(t, devruntime.Target{})
		res, err := exec(t, agentruntime.ExecRequest{BaseURL: url, Command: []string{"/no/such/hook"}})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		if res.Exited || res.Error == "" || !strings.Contains(res.Error, "/no/such/hook") {
			t.Fatalf("result = %+v, want an end event with the error", res)
		}
		if got, want := res.FailureMessage(), "hook execution error: "+res.Error; got != want {
			t.Errorf("FailureMessage() = %q, want %q", got, want)
		}
	})
	t.Run("agent-runtime reports an error", func(t *testing.T) {
		msg := "fork/exec /bin/bash: resource temporarily unavailable"
		url := fakeServer(t, &fakeHandler{start: func(_ *connect.Request[processpb.StartRequest], s *connect.ServerStream[processpb.StartResponse]) error {
			return s.Send(end(&processpb.ProcessEvent_EndEvent{ExitCode: -1, Status: "error", Error: &msg}))
		}}, nil)
		res, err := exec(t, agentruntime.ExecRequest{BaseURL: url, Command: bash("true")})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		if got, want := res.FailureMessage(), "hook execution error: "+msg; got != want {
			t.Errorf("FailureMessage() = %q, want %q", got, want)
		}
	})
}

func TestExecSurvivesKeepalivesOfASlowCommand(t *testing.T) {
	url := devServer(t, devruntime.Target{Keepalive: 100 * time.Millisecond})
	client := processconnect.NewProcessClient(h2cClient(), url, connect.WithGRPC())
	stream, err := client.Start(context.Background(), connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"1"}},
	}))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	keepalives := 0
	for stream.Receive() {
		if stream.Msg().GetEvent().GetKeepalive() != nil {
			keepalives++
		}
	}
	if keepalives < 3 {
		t.Errorf("%d keepalives during a 1s command every 100ms, want at least 3", keepalives)
	}

	res, err := exec(t, agentruntime.ExecRequest{BaseURL: url, Command: bash("sleep 0.5; echo slept")})
	if err != nil || !res.Succeeded() || res.Stdout != "slept\n" {
		t.Errorf("Exec = %+v, %v", res, err)
	}
}

func TestExecErrors(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	tokenURL := devServer(t, devruntime.Target{AccessToken: func() string { return "s3cret" }})
	noEndURL := fakeServer(t, &fakeHandler{start: func(_ *connect.Request[processpb.StartRequest], s *connect.ServerStream[processpb.StartResponse]) error {
		return s.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 1}}}})
	}}, nil)
	refusedURL := closedPortURL(t)

	for _, tc := range []struct {
		name    string
		req     agentruntime.ExecRequest
		kind    error
		message string
	}{
		{name: "wrong access token", kind: agentruntime.ErrUnauthenticated,
			req:     agentruntime.ExecRequest{BaseURL: tokenURL, AccessToken: "guess", Command: bash("true")},
			message: "hook execution error: agent-runtime rejected the access token"},
		{name: "no access token", kind: agentruntime.ErrUnauthenticated,
			req:     agentruntime.ExecRequest{BaseURL: tokenURL, Command: bash("true")},
			message: "hook execution error: agent-runtime rejected the access token"},
		{name: "stream without end event", kind: agentruntime.ErrNoEndEvent,
			req:     agentruntime.ExecRequest{BaseURL: noEndURL, Command: bash("true")},
			message: "hook execution error: stream ended without an end event"},
		{name: "timeout", kind: agentruntime.ErrTimeout,
			req:     agentruntime.ExecRequest{BaseURL: devServer(t, devruntime.Target{}), Command: bash("echo $$ > " + pidFile + "; exec sleep 60"), Timeout: time.Second},
			message: "hook execution error: timed out after 1 seconds"},
		{name: "connection refused", kind: agentruntime.ErrUnreachable,
			req: agentruntime.ExecRequest{BaseURL: refusedURL, Command: bash("true")},
			message: "hook execution error: agent-runtime at " + refusedURL + " is not reachable: dial tcp " +
				strings.TrimPrefix(refusedURL, "http://") + ": connect: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := exec(t, tc.req)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("Exec = %+v, %v; want an error of kind %q", res, err, tc.kind)
			}
			if got := agentruntime.ErrorMessage(err); got != tc.message {
				t.Errorf("ErrorMessage() = %q, want %q", got, tc.message)
			}
		})
	}

	// The runtime kills a command whose caller gave up.
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("read pid of the timed-out command: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("timed-out command (pid %d) still runs 10s after the call ended", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// With the right token the same server runs the command.
	if res, err := exec(t, agentruntime.ExecRequest{BaseURL: tokenURL, AccessToken: "s3cret", Command: bash("true")}); err != nil || !res.Succeeded() {
		t.Errorf("Exec with the right token = %+v, %v", res, err)
	}
}

func TestBaseURL(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		podIP       string
		want        string
	}{
		{name: "pod IP", podIP: "127.100.0.7", want: "http://127.100.0.7:49983"},
		{name: "IPv6 pod IP", podIP: "fd00::7", want: "http://[fd00::7]:49983"},
		{name: "annotation wins", annotations: map[string]string{"agents.kruise.io/runtime-url": "http://runtime.example:8080"},
			podIP: "127.100.0.7", want: "http://runtime.example:8080"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentruntime.BaseURL(tc.annotations, tc.podIP); got != tc.want {
				t.Errorf("BaseURL = %q, want %q", got, tc.want)
			}
		})
	}
}

// closedPortURL returns the URL of a loopback port nothing listens on.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

type fakeHandler struct {
	processconnect.UnimplementedProcessHandler
	start func(*connect.Request[processpb.StartRequest], *connect.ServerStream[processpb.StartResponse]) error
}

func (f *fakeHandler) Start(_ context.Context, req *connect.Request[processpb.StartRequest], s *connect.ServerStream[processpb.StartResponse]) error {
	return f.start(req, s)
}

func end(e *processpb.ProcessEvent_EndEvent) *processpb.StartResponse {
	return &processpb.StartResponse{Event: &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: e}}}
}

func h2cClient() *http.Client {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: protocols}}
}

// A runtime that resets the connection mid-call is ErrConnectionLost (a tagged caller may
// call again and follow the same run), not ErrUnreachable and not a bare error.
func TestExecConnectionReset(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// Speak HTTP/2 until the client's request (its HEADERS) is in, then
			// reset: SO_LINGER 0 makes Close send RST. A reset before the
			// connection is established would be "not reachable", a
			// different case, so the test waits for the request.
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err == nil {
				fr := http2.NewFramer(c, c)
				_ = fr.WriteSettings()
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						break
					}
					if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
						_ = fr.WriteSettingsAck()
					}
					if _, ok := f.(*http2.HeadersFrame); ok {
						break
					}
				}
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	url := "http://" + l.Addr().String()
	res, err := exec(t, agentruntime.ExecRequest{BaseURL: url, Command: bash("true"), Tag: "molt/a/PreUpgrade"})
	if !errors.Is(err, agentruntime.ErrConnectionLost) {
		t.Fatalf("Exec = %+v, %v; want an error of kind %q", res, err, agentruntime.ErrConnectionLost)
	}
	if errors.Is(err, agentruntime.ErrUnreachable) {
		t.Errorf("Exec error %v is also ErrUnreachable", err)
	}
	// The RST reaches the client as a reset, or, when it lands before the client
	// reads, as the stream's unexpected end: both are the connection lost.
	got, prefix := agentruntime.ErrorMessage(err), "hook execution error: connection to the agent-runtime at "+url+" was "
	if !strings.HasPrefix(got, prefix+"reset: ") && !strings.HasPrefix(got, prefix+"lost: ") {
		t.Errorf("ErrorMessage() = %q, want the prefix %q followed by reset or lost", got, prefix)
	}
}

// A hook that times out still says what it was doing: Exec returns the
// output it received with the error, and the condition message carries it
// where kubectl molt reads it.
func TestExecTimeoutKeepsTheOutputSoFar(t *testing.T) {
	url := devServer(t, devruntime.Target{})
	res, err := exec(t, agentruntime.ExecRequest{BaseURL: url, Command: bash("echo copying /data; echo waiting for the lock on /data/db >&2; exec sleep 60"), Timeout: 2 * time.Second, Tag: "timeout-output"})
	if !errors.Is(err, agentruntime.ErrTimeout) {
		t.Fatalf("Exec = %+v, %v; want a timeout", res, err)
	}
	msg := agentruntime.ErrorMessageWithOutput(err, res)
	want := "hook execution error: timed out after 2 seconds, stderr: waiting for the lock on /data/db, stdout: copying /data"
	if msg != want {
		t.Errorf("ErrorMessageWithOutput = %q, want %q", msg, want)
	}
	if stderr, stdout, ok := agentruntime.HookOutput(msg); !ok || stderr != "waiting for the lock on /data/db" || stdout != "copying /data" {
		t.Errorf("HookOutput(%q) = %q, %q, %v", msg, stderr, stdout, ok)
	}
}

// A Deadline sooner than the Timeout ends the call at it (a call made again
// to follow a run), and the error still names the hook's timeout.
func TestExecEndsAtTheRunsDeadline(t *testing.T) {
	url := devServer(t, devruntime.Target{})
	start := time.Now()
	_, err := exec(t, agentruntime.ExecRequest{BaseURL: url, Command: bash("exec sleep 60"), Timeout: time.Minute, Deadline: start.Add(time.Second), Tag: "deadline"})
	if !errors.Is(err, agentruntime.ErrTimeout) {
		t.Fatalf("Exec = %v; want a timeout at the deadline", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the call ended after %s: the deadline (1s) was not kept", took)
	}
	if got, want := agentruntime.ErrorMessage(err), "hook execution error: timed out after 60 seconds"; got != want {
		t.Errorf("ErrorMessage = %q, want %q", got, want)
	}
}
