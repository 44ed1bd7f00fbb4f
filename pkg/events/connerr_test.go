package events

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
)

// startAuthJetStream starts an in-process NATS server with JetStream and users, and
// returns its URL; it stops when the test ends.
func startAuthJetStream(t *testing.T, users ...*server.User) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), Users: users, NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("new nats server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("nats server not ready for connections within 10s")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv.ClientURL()
}

// connectJetStream connects to url with opts, as a service does (retrying in the background
// whatever the server says), and returns JetStream on it.
func connectJetStream(t *testing.T, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.IgnoreAuthErrorAbort(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
	}, opts...)...)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestOpenSaysTheLoginWasRefused: a service whose password the server refuses cannot attach,
// and the error it logs and returns says why, not only that JetStream did not answer.
func TestOpenSaysTheLoginWasRefused(t *testing.T) {
	url := startAuthJetStream(t, &server.User{Username: "patcher", Password: "right"})
	js := connectJetStream(t, url, nats.UserInfo("patcher", "wrong"))
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := Open(ctx, js, prometheus.NewRegistry(), ConsumerPatcher, StreamConfig{Storage: jetstream.MemoryStorage}, ConsumerConfig{})
	if err == nil {
		t.Fatal("Open with a refused password: attached")
	}
	t.Logf("Open: %v", err)
	if !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Errorf("Open with a refused password: %v, want it to name the server's Authorization Violation", err)
	}
}

// TestPublishSaysTheSubjectWasRefused: an event whose subject the user may not publish
// times out (nobody answers a refused request), and the error says the server refused it.
func TestPublishSaysTheSubjectWasRefused(t *testing.T) {
	url := startAuthJetStream(t,
		&server.User{Username: "admin", Password: "admin"},
		&server.User{Username: "patcher", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{"molt.*.*.patched", "$JS.API.>"}},
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := EnsureStream(ctx, connectJetStream(t, url, nats.UserInfo("admin", "admin")), StreamConfig{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	pub, err := NewPublisher(connectJetStream(t, url, nats.UserInfo("patcher", "pw")), "patcher", nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := Event{Type: TypeRequested, Data: Data{
		Sandbox: SandboxRef{Namespace: "ns", Name: "sb", UID: types.UID("uid-sb")},
		Ops:     OpsRef{Name: "ops", UID: "att"}, Attempt: "att", TargetRevision: "r2",
	}}
	pubCtx, cancelPub := context.WithTimeout(ctx, 2*time.Second)
	defer cancelPub()
	err = pub.Publish(pubCtx, ev)
	if err == nil {
		t.Fatal("publish requested as a user that may publish only patched: stored")
	}
	t.Logf("Publish: %v", err)
	if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `Publish to "molt.ns.sb.requested"`) {
		t.Errorf("publish to a refused subject: %v, want it to name the server's permissions violation for molt.ns.sb.requested", err)
	}
}
