package devhealth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// checkTimeout bounds one /healthz answer.
const checkTimeout = 3 * time.Second

// Serve answers GET /healthz on addr with 200 while kube's API server
// answers /readyz, 503 and the reason otherwise, until ctx is cancelled. It
// returns once the listener is open; serving goes on in the background and
// stops with ctx.
func Serve(ctx context.Context, addr string, kube kubernetes.Interface) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s for /healthz: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
		defer cancel()
		if _, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
			http.Error(w, "kubernetes: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: checkTimeout}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.Background().Error(err, "serve /healthz", "addr", addr)
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	return nil
}
