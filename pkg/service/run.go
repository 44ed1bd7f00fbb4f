package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"molt.dev/pkg/controller"
	"molt.dev/pkg/events"
	versioned "molt.dev/pkg/generated/clientset/versioned"
)

// Runtime is what a running service gets from the frame: clients for both
// worlds, a metrics registry and a place to add readiness checks.
type Runtime struct {
	Options    Options
	RestConfig *rest.Config
	Kube       kubernetes.Interface
	// Agents is the client of molt's API (agents.kruise.io).
	Agents    versioned.Interface
	NATS      *nats.Conn
	JetStream jetstream.JetStream
	Registry  *prometheus.Registry
	// Queues are the work queues' metrics (workqueue_*), served on Registry:
	// pass controller.WithMetrics(Queues) to controller.New.
	Queues *controller.QueueMetrics
	// Addr is the address the HTTP server actually listens on.
	Addr string

	mu     sync.Mutex
	checks map[string]func() error
	// stopping is closed once the service is told to stop (Run's ctx): it
	// is not ready from then on, whatever the checks say.
	stopping <-chan struct{}
}

// ErrShuttingDown is Ready's answer once the service is told to stop.
var ErrShuttingDown = errors.New("shutting down")

// AddReadyCheck adds a named check to /readyz; the service is ready only when
// every check returns nil.
func (r *Runtime) AddReadyCheck(name string, check func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks[name] = check
}

// OpenEvents attaches the service to the event stream (events.Open, with the
// --duplicate-window and --stream-replicas of Options), as name with the
// consumer config given; /readyz names "event stream" until it is attached,
// which Open retries while JetStream does not answer.
func (r *Runtime) OpenEvents(ctx context.Context, name string, consumer events.ConsumerConfig) (*events.Endpoint, error) {
	attached := r.NotReadyUntil("event stream")
	ep, err := events.Open(ctx, r.JetStream, r.Registry, name, r.Options.Stream, consumer)
	if err != nil {
		return nil, err
	}
	attached()
	return ep, nil
}

// NotReadyUntil adds the readiness check name, failing until done is
// called: for a start-up step (attaching to the event stream) that may take a
// while and that the service cannot work without.
func (r *Runtime) NotReadyUntil(name string) (done func()) {
	var ok atomic.Bool
	r.AddReadyCheck(name, func() error {
		if !ok.Load() {
			return errors.New("not yet")
		}
		return nil
	})
	return func() { ok.Store(true) }
}

// ReadyWhenSynced adds the readiness check "informers": ready only once every
// informer of synced has synced; what names the caches in the failure.
func (r *Runtime) ReadyWhenSynced(what string, synced ...cache.InformerSynced) {
	r.AddReadyCheck("informers", func() error {
		for _, s := range synced {
			if !s() {
				return fmt.Errorf("%s not synced yet", what)
			}
		}
		return nil
	})
}

// Ready runs every readiness check and returns the first failure.
func (r *Runtime) Ready() error {
	select {
	case <-r.stopping:
		return ErrShuttingDown
	default:
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, check := range r.checks {
		if err := check(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// Run connects to Kubernetes and NATS, serves health and metrics, and calls
// body with the Runtime. It returns when body returns (normally after ctx is
// cancelled), after shutting the HTTP server down and draining NATS.
func Run(ctx context.Context, opts Options, body func(ctx context.Context, rt *Runtime) error) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("service", opts.Name)
	ctx = klog.NewContext(ctx, logger)

	restConfig, err := LoadRestConfig(opts.Kubeconfig)
	if err != nil {
		return err
	}
	restConfig.QPS = float32(opts.KubeQPS)
	restConfig.Burst = opts.KubeBurst
	restConfig.UserAgent = "molt-" + opts.Name
	kube, err := kubernetes.NewForConfig(ProtobufConfig(restConfig))
	if err != nil {
		return fmt.Errorf("build kubernetes client: %w", err)
	}
	agents, err := versioned.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("build agents client: %w", err)
	}

	nc, err := connectNATS(ctx, opts)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("open JetStream on %s: %w", RedactURL(opts.NATSURL), err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	queues, err := controller.NewQueueMetrics(reg)
	if err != nil {
		return err
	}

	rt := &Runtime{
		Options: opts, RestConfig: restConfig, Kube: kube, Agents: agents, NATS: nc, JetStream: js, Registry: reg, Queues: queues,
		checks: map[string]func() error{}, stopping: ctx.Done(),
	}
	rt.AddReadyCheck("kubernetes", func() error { return pingKube(ctx, kube) })
	rt.AddReadyCheck("nats", func() error {
		if s := nc.Status(); s != nats.CONNECTED {
			if last := nc.LastError(); last != nil {
				return fmt.Errorf("connection to %s is %s: %v", RedactURL(opts.NATSURL), s, last)
			}
			return fmt.Errorf("connection to %s is %s", RedactURL(opts.NATSURL), s)
		}
		return nil
	})

	ln, err := net.Listen("tcp", opts.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s (flag --http-addr): %w", opts.HTTPAddr, err)
	}
	rt.Addr = ln.Addr().String()
	srv := &http.Server{Handler: rt.mux(), ReadHeaderTimeout: 5 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.Info("serving health and metrics", "addr", rt.Addr)

	bodyErr := body(ctx, rt)

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		bodyErr = errors.Join(bodyErr, fmt.Errorf("shut down HTTP server: %w", err))
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		bodyErr = errors.Join(bodyErr, fmt.Errorf("serve HTTP on %s: %w", rt.Addr, err))
	}
	if err := nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		logger.Error(err, "drain NATS connection")
	}
	logger.Info("stopped")
	return bodyErr
}

func (r *Runtime) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := r.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(r.Registry, promhttp.HandlerOpts{Registry: r.Registry}))
	if r.Options.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// ProtobufConfig is config for built-in kinds (pods, events, leases): they
// travel as protobuf, which costs the API server and the service a fraction
// of JSON's encoding and decoding, most of all in the pod watches. molt's own
// kinds have no protobuf form and keep to JSON on the config itself.
func ProtobufConfig(config *rest.Config) *rest.Config {
	c := rest.CopyConfig(config)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

// LoadRestConfig reads a kubeconfig file, or the in-cluster config when path is empty.
func LoadRestConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("load in-cluster config (set --kubeconfig or KUBECONFIG outside a cluster): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s (flag --kubeconfig): %w", path, err)
	}
	return cfg, nil
}

func pingKube(ctx context.Context, kube kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	body, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("API server /readyz: %w (%s)", err, body)
	}
	return nil
}
