package podcycler

import (
	"flag"
	"fmt"
	"time"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where podcycler serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9104"

// Defaults of podcycler's own flags.
const (
	// A worker mostly waits (the old pod going, the API server), so many run:
	// as many as the consumer lets be unacknowledged (events.DefaultMaxAckPending).
	// prehook-done events that wait for a worker wait between preUpgrade's
	// backup and the old pod's deletion, and whatever the sandbox writes then
	// is not in the backup the restore uses. With 64 workers that wait was
	// 25 s (p50) and 41 s (p99) when 1000 sandboxes started at once on the
	// local stack, and would be minutes on a cluster whose pods take their
	// 30 s grace period to stop; with 1000 it was 0.7 s and 1.6 s. The
	// replacements then wait for the cluster instead, with the old pod gone.
	DefaultWorkers         = 1000
	DefaultPodReadyTimeout = 5 * time.Minute
	// The UpgradePod handler creates the new pod within milliseconds of the old one
	// going; ten seconds without it means the handler died.
	DefaultUpgradePodGrace = 10 * time.Second
)

// Config is everything podcycler needs to run.
type Config struct {
	service.Options

	// Workers bounds how many sandboxes are synced, and how many prehook-done events are
	// handled, at once.
	Workers int
	// PodReadyTimeout is how long a pod created by an upgrade may take to become Ready
	// before the upgrade fails with UpgradePodFailed.
	PodReadyTimeout time.Duration
	// UpgradePodGrace is how long the lifecycle loop leaves a pod missing under UpgradePod
	// to the stage's handler before it creates the pod itself.
	UpgradePodGrace time.Duration
}

// RegisterFlags adds podcycler's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "podcycler", DefaultHTTPAddr)
	fs.IntVar(&c.Workers, "workers", c.Env.Int("MOLT_PODCYCLER_WORKERS", DefaultWorkers),
		"sandboxes synced and prehook-done events handled at once (env MOLT_PODCYCLER_WORKERS)")
	fs.DurationVar(&c.PodReadyTimeout, "pod-ready-timeout", c.Env.Duration("MOLT_POD_READY_TIMEOUT", DefaultPodReadyTimeout),
		"how long an upgraded pod may take to become Ready before the upgrade fails (env MOLT_POD_READY_TIMEOUT)")
	fs.DurationVar(&c.UpgradePodGrace, "upgrade-pod-grace", c.Env.Duration("MOLT_UPGRADE_POD_GRACE", DefaultUpgradePodGrace),
		"how long a pod missing during UpgradePod is left to the stage's handler before podcycler creates it anyway (env MOLT_UPGRADE_POD_GRACE)")
}

// Validate reports the first setting that cannot work, naming its flag.
func (c *Config) Validate() error {
	if err := c.Options.Validate(); err != nil {
		return err
	}
	switch {
	case c.Workers < 1:
		return fmt.Errorf("flag --workers=%d: must be at least 1", c.Workers)
	case c.PodReadyTimeout <= 0:
		return fmt.Errorf("flag --pod-ready-timeout=%s: must be greater than 0", c.PodReadyTimeout)
	case c.UpgradePodGrace < 0:
		return fmt.Errorf("flag --upgrade-pod-grace=%s: must not be negative", c.UpgradePodGrace)
	}
	return nil
}
