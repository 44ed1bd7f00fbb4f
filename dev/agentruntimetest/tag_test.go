package agentruntimetest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"molt.dev/dev/devruntime"
	"molt.dev/pkg/agentruntime"
	processpb "molt.dev/pkg/agentruntime/gen/process"
	"molt.dev/pkg/agentruntime/gen/process/processconnect"
)

// A tagged command runs once however often, and however late, a caller
// that lost it calls again: the second call follows the first run to its
// end, running or ended.

// runs counts the lines script appended to its file: one per run.
func runs(t *testing.T, file string) int {
	t.Helper()
	raw, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	return strings.Count(string(raw), "\n")
}

func TestTaggedExecSurvivesItsCaller(t *testing.T) {
	// connects counts the Connect calls that reach the runtime: every
	// tagged caller first looks for its tag's run with one.
	var connects atomic.Int32
	srv := devruntime.NewServer(devruntime.Target{})
	inner := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == processconnect.ProcessConnectProcedure {
			connects.Add(1)
		}
		inner.ServeHTTP(w, r)
	})
	url := serve(t, srv)
	dir := t.TempDir()
	file, gate := filepath.Join(dir, "runs"), filepath.Join(dir, "gate")
	// The command records its run, then waits for the gate file.
	script := "echo run >> " + file + "; echo first-output; while [ ! -e " + gate + " ]; do sleep 0.05; done; echo backed-up; echo warn >&2; exit 0"
	req := agentruntime.ExecRequest{BaseURL: url, Command: bash(script), Tag: "molt/attempt-1/PreUpgrade", Timeout: 30 * time.Second}

	// The first caller dies while the command runs.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := agentruntime.Exec(ctx, req); done <- err }()
	waitFor(t, func() bool { return runs(t, file) == 1 }, "the command's first run")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("first Exec after cancel = %v, want context.Canceled", err)
	}

	// The second caller attaches to the same run, which goes on. The first
	// caller's own look-up was a Connect too, so count from here.
	before := connects.Load()
	second := make(chan struct {
		res agentruntime.Result
		err error
	}, 1)
	go func() {
		res, err := agentruntime.Exec(context.Background(), req)
		second <- struct {
			res agentruntime.Result
			err error
		}{res, err}
	}()
	waitFor(t, func() bool { return connects.Load() > before }, "the second caller to attach while the command runs")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := <-second
	if got.err != nil {
		t.Fatalf("second Exec: %v", got.err)
	}
	want := agentruntime.Result{ExitCode: 0, Exited: true, Status: "exit status 0", Stdout: "first-output\nbacked-up\n", Stderr: "warn\n", Reattached: true}
	if got.res != want {
		t.Errorf("second Exec = %+v, want %+v", got.res, want)
	}

	// A third caller, after the end, gets the same end without a run.
	res, err := agentruntime.Exec(context.Background(), req)
	if err != nil || res != want {
		t.Errorf("third Exec after the end = %+v, %v; want %+v", res, err, want)
	}
	if n := runs(t, file); n != 1 {
		t.Errorf("the tagged command ran %d times, want 1", n)
	}

	// Another tag is another run.
	other := req
	other.Tag = "molt/attempt-2/PreUpgrade"
	if res, err := agentruntime.Exec(context.Background(), other); err != nil || !res.Succeeded() || res.Reattached {
		t.Errorf("Exec with a new tag = %+v, %v; want a fresh successful run", res, err)
	}
	if n := runs(t, file); n != 2 {
		t.Errorf("after a second tag the command ran %d times, want 2", n)
	}
}

func TestTaggedExecKilledAtItsTimeout(t *testing.T) {
	url := devServer(t, devruntime.Target{})
	pidFile := filepath.Join(t.TempDir(), "pid")
	req := agentruntime.ExecRequest{BaseURL: url, Command: bash("echo $$ > " + pidFile + "; exec sleep 60"), Tag: "molt/a/PreUpgrade", Timeout: time.Second}
	_, err := agentruntime.Exec(context.Background(), req)
	if !errors.Is(err, agentruntime.ErrTimeout) {
		t.Fatalf("Exec = %v, want a timeout", err)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("read pid: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	waitFor(t, func() bool { return syscall.Kill(pid, 0) != nil }, "the timed-out tagged command to be killed")
	// Its end stays: a caller that comes back reads how it ended, no rerun.
	req.Timeout = 10 * time.Second
	res, err := agentruntime.Exec(context.Background(), req)
	if err != nil || res.Exited || res.ExitCode != -9 || !res.Reattached {
		t.Errorf("Exec after the kill = %+v, %v; want the killed run's end (exit code -9, reattached)", res, err)
	}
}

// A caller that follows a run an earlier caller started (a hookrunner that
// died mid-hook, its message redelivered) ends it at the run's own deadline
// (FollowDeadline), not a fresh Timeout from its call; an ended run's result
// is still read past it, and a run it starts itself gets the whole Timeout.
func TestTaggedExecFollowsAnEarlierRunToItsOwnDeadline(t *testing.T) {
	url := devServer(t, devruntime.Target{})
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	req := agentruntime.ExecRequest{BaseURL: url, Command: bash("echo $$ > " + pidFile + "; exec sleep 60"), Tag: "molt/a/PreUpgrade", Timeout: 30 * time.Second}

	// The first caller starts the run and dies.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := agentruntime.Exec(ctx, req); done <- err }()
	waitFor(t, func() bool { _, err := os.Stat(pidFile); return err == nil }, "the command's first run")
	cancel()
	<-done

	// The run started "long ago": its Timeout is used up.
	late := req
	late.FollowDeadline = time.Now().Add(-time.Second)
	start := time.Now()
	_, err := agentruntime.Exec(context.Background(), late)
	if !errors.Is(err, agentruntime.ErrTimeout) {
		t.Fatalf("Exec following a run past its deadline = %v, want a timeout", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %s to time out a run past its deadline, want about the grace (a fresh Timeout is 30s)", took)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	waitFor(t, func() bool { return syscall.Kill(pid, 0) != nil }, "the run past its deadline to be killed")

	// An ended run's result is read whatever the deadline says.
	res, err := agentruntime.Exec(context.Background(), late)
	if err != nil || res.ExitCode != -9 || !res.Reattached {
		t.Errorf("Exec of the ended run = %+v, %v; want its end (exit code -9, reattached)", res, err)
	}

	// No run of the tag yet: this call starts it and gives it the whole Timeout.
	fresh := agentruntime.ExecRequest{BaseURL: url, Command: bash("sleep 3; echo done"), Tag: "molt/b/PreUpgrade", Timeout: 30 * time.Second,
		FollowDeadline: time.Now().Add(-time.Hour)}
	if res, err := agentruntime.Exec(context.Background(), fresh); err != nil || !res.Succeeded() || res.Reattached {
		t.Errorf("Exec starting the run = %+v, %v; want it run to success with its whole Timeout", res, err)
	}
}

func TestDevRuntimeTags(t *testing.T) {
	stopped := make(chan struct{})
	url := devServer(t, devruntime.Target{Stopped: stopped})
	client := processconnect.NewProcessClient(h2cClient(), url, connect.WithGRPC())
	ctx := context.Background()
	tag := "molt/x/PostUpgrade"
	pidFile := filepath.Join(t.TempDir(), "pid")

	// Connect to a tag nobody started: NotFound.
	cs, err := client.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: tag}}}))
	if err == nil {
		for cs.Receive() {
		}
		err = cs.Err()
	}
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("Connect to an unknown tag: %v, want NotFound", err)
	}

	// Start it; a second Start of the same tag is refused.
	start := func() *connect.ServerStreamForClient[processpb.StartResponse] {
		req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "echo $$ > " + pidFile + "; exec sleep 60"}}, Tag: &tag})
		s, err := client.Start(ctx, req)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		return s
	}
	first := start()
	if !first.Receive() || first.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("first Start: no start event (%v)", first.Err())
	}
	dup := start()
	for dup.Receive() {
	}
	if connect.CodeOf(dup.Err()) != connect.CodeAlreadyExists {
		t.Errorf("second Start of tag %q: %v, want AlreadyExists", tag, dup.Err())
	}
	first.Close()
	waitFor(t, func() bool { _, err := os.Stat(pidFile); return err == nil }, "the tagged command to start")
	raw, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	time.Sleep(200 * time.Millisecond)
	if syscall.Kill(pid, 0) != nil {
		t.Fatalf("tagged command (pid %d) died with its caller", pid)
	}

	// A SIGTERM request that is neither SIGTERM nor SIGKILL is refused.
	_, err = client.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: tag}}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("SendSignal without a signal: %v, want InvalidArgument", err)
	}
	// When the pod's runtime stops, its processes die.
	close(stopped)
	waitFor(t, func() bool { return syscall.Kill(pid, 0) != nil }, "the tagged command to die when its runtime stopped")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cutRuntime starts a command (a start event, some output) and then ends the stream
// with cut, as a gateway or an HTTP/2 reset does, while the command runs on. It counts
// the kills sent to the tag.
type cutRuntime struct {
	processconnect.UnimplementedProcessHandler
	cut    error
	silent bool // fails the Start at once, before any event: nothing started
	kills  atomic.Int32
}

func (c *cutRuntime) Connect(context.Context, *connect.Request[processpb.ConnectRequest], *connect.ServerStream[processpb.ConnectResponse]) error {
	return connect.NewError(connect.CodeNotFound, errors.New("no process of that tag"))
}

func (c *cutRuntime) Start(_ context.Context, _ *connect.Request[processpb.StartRequest], s *connect.ServerStream[processpb.StartResponse]) error {
	if c.silent {
		return c.cut
	}
	_ = s.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 42}}}})
	_ = s.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{
		Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("writing the archive\n")}}}}})
	return c.cut
}

func (c *cutRuntime) SendSignal(_ context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	if req.Msg.GetProcess().GetTag() == "molt/a1/PreUpgrade" && req.Msg.GetSignal() == processpb.Signal_SIGNAL_SIGKILL {
		c.kills.Add(1)
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

// A tagged run whose stream fails in a way no later call follows it through (an
// internal error, a stream closed without an end event) is killed: left running, it
// would go on while its attempt is reported failed, and the resume would start the
// command again beside it. A connection lost is left to the caller, which calls again
// and follows the run; a call refused before the run started kills nothing.
func TestTaggedExecKillsARunItCannotFollow(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cut      error
		silent   bool
		wantKill bool
	}{
		{"internal error", connect.NewError(connect.CodeInternal, errors.New("upstream stream reset")), false, true},
		{"no end event", nil, false, true},
		// A gateway at runtime-url that answers 404 or 500 started nothing.
		{"refused before it started", connect.NewError(connect.CodeUnimplemented, errors.New("404 page not found")), true, false},
		{"unavailable: the caller calls again and follows it", connect.NewError(connect.CodeUnavailable, io.ErrUnexpectedEOF), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &cutRuntime{cut: tc.cut, silent: tc.silent}
			url := fakeServer(t, rt, nil)
			res, err := agentruntime.Exec(context.Background(), agentruntime.ExecRequest{BaseURL: url, Command: bash("true"), Tag: "molt/a1/PreUpgrade", Timeout: 30 * time.Second})
			if err == nil {
				t.Fatalf("Exec = %+v, want an error", res)
			}
			if got := rt.kills.Load() > 0; got != tc.wantKill {
				t.Errorf("Exec = %v; killed %t, want %t", err, got, tc.wantKill)
			}
		})
	}
}
