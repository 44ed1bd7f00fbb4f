package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// startNATS starts an in-process NATS server with users; it stops when the test ends.
func startNATS(t *testing.T, users ...*server.User) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, Users: users, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("new nats server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("nats server not ready for connections within 10s")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// bufferedLogger returns a context whose logger keeps every entry up to verbosity v, and the
// entries logged so far.
func bufferedLogger(t *testing.T, v int) (context.Context, func() ktesting.Log) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(v)))
	buf := logger.GetSink().(ktesting.Underlier).GetBuffer()
	return klog.NewContext(context.Background(), logger), buf.Data
}

// passwordFile writes pw to a file and returns its path.
func passwordFile(t *testing.T, pw string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitLogged polls the log until an error entry whose error matches target appears, and
// returns it with the entry's key/value pairs printed.
func waitLogged(t *testing.T, entries func() ktesting.Log, target error, within time.Duration) (ktesting.LogEntry, string) {
	t.Helper()
	return waitLoggedFunc(t, entries, fmt.Sprintf("%q", target), func(err error) bool { return errors.Is(err, target) }, within)
}

// waitLoggedFunc is waitLogged for an error that match accepts (what, for the failure).
func waitLoggedFunc(t *testing.T, entries func() ktesting.Log, what string, match func(error) bool, within time.Duration) (ktesting.LogEntry, string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, e := range entries() {
			if e.Type == ktesting.LogError && match(e.Err) {
				return e, fmt.Sprint(append(append([]any{}, e.WithKVList...), e.ParameterKVList...))
			}
		}
		if time.Now().After(deadline) {
			var all []string
			for _, e := range entries() {
				all = append(all, fmt.Sprintf("%s %q err=%v %v %v", e.Type, e.Message, e.Err, e.WithKVList, e.ParameterKVList))
			}
			t.Fatalf("no error entry matching %s logged within %s; the log:\n%s", what, within, strings.Join(all, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConnectNATSLogsARefusedLogin: a service whose password the server refuses keeps
// retrying in the background (connectNATS returns a connection), and within seconds its log
// says so: the Authorization Violation, the server, the user and the flags to check. The
// connection's last error (what /readyz reports) says it too.
func TestConnectNATSLogsARefusedLogin(t *testing.T) {
	srv := startNATS(t, &server.User{Username: "patcher", Password: "right"})
	ctx, entries := bufferedLogger(t, 0)
	opts := Options{Name: "patcher", NATSURL: srv.ClientURL(), NATSAuth: NATSAuth{User: "patcher", PasswordFile: passwordFile(t, "wrong")}}
	nc, err := connectNATS(ctx, opts)
	if err != nil {
		t.Fatalf("connectNATS with a refused password: %v, want a connection retrying in the background", err)
	}
	defer nc.Close()

	e, kv := waitLogged(t, entries, nats.ErrAuthorization, 5*time.Second)
	t.Logf("logged: %s: %v %s", e.Message, e.Err, kv)
	if !strings.Contains(e.Err.Error(), "Authorization Violation") {
		t.Errorf("logged error %q, want the server's Authorization Violation", e.Err)
	}
	for _, want := range []string{srv.ClientURL(), "user patcher", "--nats-password-file", opts.NATSAuth.PasswordFile} {
		if !strings.Contains(kv, want) {
			t.Errorf("the log entry %q does not name %q: %s", e.Message, want, kv)
		}
	}
	// nats.go clears the last error when it starts reconnecting, and sets it again at the
	// next refused attempt, ReconnectWait (500ms) later.
	deadline := time.Now().Add(5 * time.Second)
	for s, last := nc.Status(), nc.LastError(); s == nats.CONNECTED || !errors.Is(last, nats.ErrAuthorization); s, last = nc.Status(), nc.LastError() {
		if time.Now().After(deadline) {
			t.Fatalf("connection is %s with last error %v, want not connected with an authorization violation", s, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConnectNATSLogsARefusedSubject: a publish the user's permissions refuse, which the
// publisher sees only as a timeout, is logged with the subject and the permissions to check.
func TestConnectNATSLogsARefusedSubject(t *testing.T) {
	srv := startNATS(t, &server.User{Username: "selector", Password: "pw", Permissions: &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{"molt.*.*.requested"}},
	}})
	ctx, entries := bufferedLogger(t, 0)
	opts := Options{Name: "selector", NATSURL: srv.ClientURL(), NATSAuth: NATSAuth{User: "selector", PasswordFile: passwordFile(t, "pw")}}
	nc, err := connectNATS(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("molt.ns.sb.prehook-done", nil); err != nil {
		t.Fatal(err)
	}
	e, kv := waitLogged(t, entries, nats.ErrPermissionViolation, 5*time.Second)
	t.Logf("logged: %s: %v %s", e.Message, e.Err, kv)
	for _, want := range []string{"molt.ns.sb.prehook-done", "Publish"} {
		if !strings.Contains(e.Err.Error(), want) {
			t.Errorf("logged error %q does not name %q", e.Err, want)
		}
	}
	if !strings.Contains(kv, "permissions of selector in the NATS config") {
		t.Errorf("the log entry does not say to check selector's permissions: %s", kv)
	}
}

// TestConnLogQuietsRepeats: a problem is logged at once; the same kind again within the
// quiet period only at V(2), and after it at V(0) with how many came meanwhile; another kind
// is logged at once, and so is the first problem after a reconnect.
func TestConnLogQuietsRepeats(t *testing.T) {
	ctx, entries := bufferedLogger(t, 2)
	now := time.Unix(1000, 0)
	l := newConnLog(klog.FromContext(ctx), Options{NATSURL: "nats://127.0.0.1:4222", NATSAuth: NATSAuth{User: "patcher", PasswordFile: "/pw"}})
	l.now = func() time.Time { return now }
	auth := fmt.Errorf("wrapped: %w", nats.ErrAuthorization)
	perm := fmt.Errorf("%w: Permissions Violation for Publish to \"x\"", nats.ErrPermissionViolation)
	steps := []struct {
		name  string
		after time.Duration
		do    func()
		want  string // the entry logged: V0 or V2 and, after a quiet period, what it says
	}{
		{"first refused login", 0, func() { l.problem("refused", true, auth) }, "V0"},
		{"again a second later", time.Second, func() { l.problem("refused", true, auth) }, "V2"},
		{"and again", time.Second, func() { l.problem("refused", true, auth) }, "V2"},
		{"a refused subject meanwhile", time.Second, func() { l.problem("subject", false, perm) }, "V0"},
		{"a refused login after the quiet period", connLogQuiet, func() { l.problem("refused", true, auth) }, "V0 2 more in 33s"},
		{"reconnected", time.Second, func() { l.connected("Reconnected to NATS", nil) }, "V0"},
		{"refused right after the reconnect", time.Second, func() { l.problem("refused", true, auth) }, "V0"},
	}
	for i, s := range steps {
		now = now.Add(s.after)
		s.do()
		log := entries()
		if len(log) != i+1 {
			t.Fatalf("%s: %d entries logged, want %d", s.name, len(log), i+1)
		}
		e := log[i]
		got := fmt.Sprintf("V%d", e.Verbosity)
		for j := 0; j+1 < len(e.ParameterKVList); j += 2 {
			if e.ParameterKVList[j] == "sinceLastLogged" {
				got += fmt.Sprintf(" %v", e.ParameterKVList[j+1])
			}
		}
		if got != s.want {
			t.Errorf("%s: logged %s (%q %v), want %s", s.name, got, e.Message, e.ParameterKVList, s.want)
		}
	}
}
