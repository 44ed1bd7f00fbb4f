package selector

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"molt.dev/dev/devcluster"
	"molt.dev/dev/testenv"
	"molt.dev/pkg/service"
)

// TestNotReadyWhileItsCachesCannotSync runs the selector as a user the API
// server lets list nothing (RBAC refuses its informers): it must show not
// ready, naming the caches, rather than look healthy while it admits nothing.
func TestNotReadyWhileItsCachesCannotSync(t *testing.T) {
	env := testenv.Get(t)
	path := env.KubeconfigAs(t, "molt-test-no-rbac")
	port, err := devcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := Config{
		Options: service.Options{
			Name: "selector", Kubeconfig: path, NATSURL: env.NATSURL, NATSAuth: env.NATSAuth("selector"), HTTPAddr: addr,
			KubeQPS: 50, KubeBurst: 100, ShutdownTimeout: 5 * time.Second,
		},
		Workers: 1, RepublishAfter: DefaultRepublishAfter,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	defer func() {
		// Stopped before its caches synced, it says so and returns.
		cancel()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "caches did not sync") {
				t.Errorf("selector.Run returned %v, want: caches did not sync", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("selector.Run did not return within 20s of cancel")
		}
	}()
	testenv.Eventually(t, 20*time.Second, "/readyz names the caches", func() (bool, error) {
		code, body := testenv.HTTPGet(addr, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "ops, sandbox, pod and SandboxSet caches not synced yet"), fmt.Errorf("%d %s", code, body)
	})
	testenv.Consistently(t, 3*time.Second, "/readyz stays not ready", func() (bool, error) {
		code, body := testenv.HTTPGet(addr, "/readyz")
		return code == http.StatusServiceUnavailable, fmt.Errorf("%d %s", code, body)
	})
}
