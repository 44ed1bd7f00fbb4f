package service

import (
	"flag"
	"fmt"
	"time"

	"molt.dev/pkg/events"
)

// Options are the settings every service takes. Each has a flag and an
// environment variable fallback (flag wins), so the same binary runs from a
// shell, from `make up` and as a Deployment.
type Options struct {
	// Name is the service name; it labels logs, metrics and the NATS connection.
	Name string
	// Kubeconfig is the path of a kubeconfig file; empty means in-cluster.
	Kubeconfig string
	// NATSURL is the NATS server URL (several, comma-separated, for a
	// cluster). Credentials go in NATSAuth, not in the URL.
	NATSURL string
	// NATSAuth is how the service logs in to NATS.
	NATSAuth NATSAuth
	// NATSTLS is how the service checks the server's certificate (and shows
	// its own); empty means plain TCP unless NATSURL is tls://.
	NATSTLS NATSTLS
	// HTTPAddr is where /healthz, /readyz and /metrics are served.
	HTTPAddr string
	// Pprof also serves Go's profiles under /debug/pprof/ on HTTPAddr.
	Pprof bool
	// KubeQPS and KubeBurst set client-go's client-side rate limit.
	KubeQPS   float64
	KubeBurst int
	// ShutdownTimeout bounds how long a clean shutdown may take.
	ShutdownTimeout time.Duration
	// Stream is the config of the event stream for when this service
	// creates it (the first service to start does; a running stream is kept
	// as it is, see events.EnsureStream). Its duplicate window and replicas
	// are flags; the zero value of every other field is the production
	// default.
	Stream events.StreamConfig

	// Env is where the flag defaults came from; services register their
	// own flags through it too, and Validate reports what did not parse.
	Env Env
}

// RegisterFlags adds the common flags to fs with defaults taken from the
// environment. defaultAddr is the service's own default listen address.
func (o *Options) RegisterFlags(fs *flag.FlagSet, name, defaultAddr string) {
	o.Name = name
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Env.String("KUBECONFIG", ""), "path to a kubeconfig file; empty means in-cluster config (env KUBECONFIG)")
	fs.StringVar(&o.NATSURL, "nats-url", o.Env.String("MOLT_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL, or several comma-separated (env MOLT_NATS_URL)")
	fs.StringVar(&o.NATSAuth.User, "nats-user", o.Env.String("MOLT_NATS_USER", ""), "NATS user, with --nats-password-file (env MOLT_NATS_USER)")
	fs.StringVar(&o.NATSAuth.PasswordFile, "nats-password-file", o.Env.String("MOLT_NATS_PASSWORD_FILE", ""),
		"file holding the NATS user's password, read again at every reconnect (env MOLT_NATS_PASSWORD_FILE)")
	fs.StringVar(&o.NATSAuth.CredsFile, "nats-creds", o.Env.String("MOLT_NATS_CREDS", ""), "NATS credentials file, instead of a user and password (env MOLT_NATS_CREDS)")
	fs.StringVar(&o.NATSTLS.CAFile, "nats-tls-ca", o.Env.String("MOLT_NATS_TLS_CA", ""),
		"PEM file of the CA that signs the NATS server's certificate; set, TLS is required (env MOLT_NATS_TLS_CA)")
	fs.StringVar(&o.NATSTLS.CertFile, "nats-tls-cert", o.Env.String("MOLT_NATS_TLS_CERT", ""),
		"PEM client certificate for a NATS server that verifies its clients, with --nats-tls-key (env MOLT_NATS_TLS_CERT)")
	fs.StringVar(&o.NATSTLS.KeyFile, "nats-tls-key", o.Env.String("MOLT_NATS_TLS_KEY", ""), "PEM key of --nats-tls-cert (env MOLT_NATS_TLS_KEY)")
	fs.IntVar(&o.Stream.Replicas, "stream-replicas", o.Env.Int("MOLT_STREAM_REPLICAS", 1),
		"replicas of the event stream, set when this service creates it: 3 on a 3-node JetStream cluster (env MOLT_STREAM_REPLICAS)")
	fs.StringVar(&o.HTTPAddr, "http-addr", o.Env.String("MOLT_HTTP_ADDR", defaultAddr), "address for /healthz, /readyz and /metrics (env MOLT_HTTP_ADDR)")
	fs.BoolVar(&o.Pprof, "pprof", o.Env.Bool("MOLT_PPROF", false), "also serve Go's CPU and heap profiles under /debug/pprof/ on --http-addr (env MOLT_PPROF)")
	fs.Float64Var(&o.KubeQPS, "kube-qps", o.Env.Float("MOLT_KUBE_QPS", 200), "client-side QPS limit towards the API server (env MOLT_KUBE_QPS)")
	fs.IntVar(&o.KubeBurst, "kube-burst", o.Env.Int("MOLT_KUBE_BURST", 400), "client-side burst towards the API server (env MOLT_KUBE_BURST)")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.Env.Duration("MOLT_SHUTDOWN_TIMEOUT", 10*time.Second), "how long a clean shutdown may take (env MOLT_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&o.Stream.Duplicates, "duplicate-window", o.Env.Duration("MOLT_DUPLICATE_WINDOW", events.DefaultDuplicates),
		"the event stream's duplicate window, set when this service creates the stream: a message id published again within it is dropped (env MOLT_DUPLICATE_WINDOW)")
}

// Validate reports the first setting that cannot work, naming its flag.
func (o *Options) Validate() error {
	if err := o.Env.Err(); err != nil {
		return err
	}
	switch {
	case o.Name == "":
		return fmt.Errorf("service name is empty")
	case o.NATSURL == "":
		return fmt.Errorf("flag --nats-url: must not be empty")
	case o.HTTPAddr == "":
		return fmt.Errorf("flag --http-addr: must not be empty")
	case o.KubeQPS <= 0:
		return fmt.Errorf("flag --kube-qps=%v: must be greater than 0", o.KubeQPS)
	case o.KubeBurst <= 0:
		return fmt.Errorf("flag --kube-burst=%d: must be greater than 0", o.KubeBurst)
	case o.ShutdownTimeout <= 0:
		return fmt.Errorf("flag --shutdown-timeout=%s: must be greater than 0", o.ShutdownTimeout)
	case o.Stream.Replicas < 0 || o.Stream.Replicas > 5:
		return fmt.Errorf("flag --stream-replicas=%d: must be between 1 and 5", o.Stream.Replicas)
	case o.Stream.Duplicates < 0:
		return fmt.Errorf("flag --duplicate-window=%s: must not be negative (0 means the default, %s)", o.Stream.Duplicates, events.DefaultDuplicates)
	}
	if err := o.NATSAuth.validate(); err != nil {
		return err
	}
	return o.NATSTLS.Validate()
}
