package servicetest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"molt.dev/dev/devcluster"
	"molt.dev/dev/testenv"
	"molt.dev/pkg/service"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// startService runs service.Run in the background and returns the address it
// serves on and a stop function that waits for Run to return.
func startService(t *testing.T, natsURL string) (addr string, stop func() error) {
	t.Helper()
	return startServiceAs(t, natsURL, testenv.Get(t).NATSAuth("admin"))
}

// startServiceAs is startService logging in to NATS as auth says.
func startServiceAs(t *testing.T, natsURL string, auth service.NATSAuth) (addr string, stop func() error) {
	t.Helper()
	env := testenv.Get(t)
	opts := service.Options{
		Name: "test", Kubeconfig: env.Kubeconfig, NATSURL: natsURL, NATSAuth: auth, HTTPAddr: "127.0.0.1:0",
		KubeQPS: 50, KubeBurst: 100, ShutdownTimeout: 5 * time.Second,
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, opts, func(ctx context.Context, rt *service.Runtime) error {
			addrCh <- rt.Addr
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case addr = <-addrCh:
	case err := <-done:
		t.Fatalf("service.Run returned early: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("service did not start serving within 30s")
	}
	return addr, func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			return fmt.Errorf("service.Run did not return within 15s of cancel")
		}
	}
}

func get(addr, path string) (int, string) { return testenv.HTTPGet(addr, path) }

func TestReadyOnlyWhenKubernetesAndNATSAnswer(t *testing.T) {
	env := testenv.Get(t)
	addr, stop := startService(t, env.NATSURL)
	testenv.Eventually(t, 20*time.Second, "/readyz 200", func() (bool, error) {
		code, body := get(addr, "/readyz")
		return code == http.StatusOK, fmt.Errorf("%d %s", code, body)
	})
	if code, _ := get(addr, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	if code, body := get(addr, "/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics = %d\n%.200s", code, body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestNotReadyWithoutNATS(t *testing.T) {
	port, err := devcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startService(t, fmt.Sprintf("nats://127.0.0.1:%d", port))
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	// Kubernetes answers, NATS does not: not ready, and the reason says so.
	testenv.Eventually(t, 10*time.Second, "/readyz names nats", func() (bool, error) {
		code, body := get(addr, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "nats"), fmt.Errorf("%d %s", code, body)
	})
}

// TestNotReadyWithAWrongNATSPassword: a service whose password NATS refuses
// is not ready and says why, without printing the password; when the file
// gets the right password (a rotated Secret), it connects without a restart.
func TestNotReadyWithAWrongNATSPassword(t *testing.T) {
	env := testenv.Get(t)
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("wrong-secret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, stop := startServiceAs(t, env.NATSURL, service.NATSAuth{User: "patcher", PasswordFile: file})
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	testenv.Eventually(t, 10*time.Second, "/readyz names the authorization violation", func() (bool, error) {
		code, body := get(addr, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(strings.ToLower(body), "authorization violation"), fmt.Errorf("%d %s", code, body)
	})
	if _, body := get(addr, "/readyz"); strings.Contains(body, "wrong-secret-value") {
		t.Fatalf("/readyz prints the password: %s", body)
	}
	if err := os.WriteFile(file, []byte(env.NATSPasswords.Password("patcher")), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "/readyz 200 after the password file changed", func() (bool, error) {
		code, body := get(addr, "/readyz")
		return code == http.StatusOK, fmt.Errorf("%d %s", code, body)
	})
}

func TestNATSFlagsMustGoTogether(t *testing.T) {
	for _, tc := range []struct {
		name string
		auth service.NATSAuth
		flag string
	}{
		{"user without password file", service.NATSAuth{User: "patcher"}, "--nats-password-file"},
		{"password file without user", service.NATSAuth{PasswordFile: "/p"}, "--nats-user"},
		{"creds and user", service.NATSAuth{CredsFile: "/c", User: "patcher", PasswordFile: "/p"}, "--nats-creds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := service.Run(context.Background(), service.Options{Name: "x", NATSURL: "nats://x", NATSAuth: tc.auth, HTTPAddr: ":0", KubeQPS: 1, KubeBurst: 1, ShutdownTimeout: time.Second},
				func(context.Context, *service.Runtime) error { return nil })
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("err = %v, want one naming %s", err, tc.flag)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":             "nats://127.0.0.1:4222",
		"nats://patcher:s3cret@nats:4222":   "nats://redacted@nats:4222",
		"nats://a:1@n0:4222,nats://n1:4222": "nats://redacted@n0:4222,nats://n1:4222",
		"nats://tok%zz@n0:4222":             "(a URL with credentials, not shown)",
	} {
		if got := service.RedactURL(in); got != want || strings.Contains(got, "s3cret") {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBadConfigNamesTheFlag(t *testing.T) {
	err := service.Run(context.Background(), service.Options{Name: "x", NATSURL: "nats://x", HTTPAddr: ":0", KubeQPS: 0, KubeBurst: 1, ShutdownTimeout: time.Second},
		func(context.Context, *service.Runtime) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "--kube-qps") {
		t.Fatalf("err = %v, want one naming --kube-qps", err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	err = service.Run(context.Background(), service.Options{Name: "x", Kubeconfig: missing, NATSURL: "nats://x", HTTPAddr: ":0", KubeQPS: 1, KubeBurst: 1, ShutdownTimeout: time.Second},
		func(context.Context, *service.Runtime) error { return nil })
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Fatalf("err = %v, want one naming the kubeconfig path and flag", err)
	}
	_ = os.Remove(missing)
}

// TestNotReadyWhileTheLeaseIsRefused: a replica campaigning for a Lease the
// API server refuses it (no RBAC on leases) is not ready and says which
// grant is missing; it would otherwise look ready while no replica works.
func TestNotReadyWhileTheLeaseIsRefused(t *testing.T) {
	env := testenv.Get(t)
	path := env.KubeconfigAs(t, "molt-test-no-leases")
	ns := env.Namespace(t)
	opts := service.Options{
		Name: "test", Kubeconfig: path, NATSURL: env.NATSURL, NATSAuth: env.NATSAuth("admin"), HTTPAddr: "127.0.0.1:0",
		KubeQPS: 50, KubeBurst: 100, ShutdownTimeout: 5 * time.Second,
	}
	election := service.LeaderElection{Enabled: true, Namespace: ns, LeaseName: "molt-test"}
	addrCh := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, opts, func(ctx context.Context, rt *service.Runtime) error {
			addrCh <- rt.Addr
			return election.Run(ctx, rt, func(ctx context.Context) error {
				t.Error("led a Lease the API server refuses")
				<-ctx.Done()
				return nil
			})
		})
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("service.Run did not return within 15s of cancel")
		}
	}()
	var addr string
	select {
	case addr = <-addrCh:
	case <-time.After(30 * time.Second):
		t.Fatal("service did not start serving within 30s")
	}
	testenv.Eventually(t, 20*time.Second, "/readyz names the refused Lease", func() (bool, error) {
		code, body := get(addr, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "the API server refuses Lease "+ns+"/molt-test") &&
			strings.Contains(body, "grant this service's ServiceAccount get, create and update on leases"), fmt.Errorf("%d %s", code, body)
	})
}
