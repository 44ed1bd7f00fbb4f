package patcher

import (
	"flag"
	"fmt"
	"time"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where patcher serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9102"

// Config is everything patcher needs to run.
type Config struct {
	service.Options
	// Workers is how many sandboxes are patched at once.
	Workers int
	// PodReadyTimeout is how long a paused sandbox woken for its upgrade may
	// take to have a Ready pod before its attempt fails.
	PodReadyTimeout time.Duration
}

// Flag defaults.
const (
	// DefaultWorkers is --workers's default.
	DefaultWorkers = 64
	// DefaultPodReadyTimeout is --pod-ready-timeout's default, the same as
	// podcycler's and statusagg's.
	DefaultPodReadyTimeout = 5 * time.Minute
)

// RegisterFlags adds patcher's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "patcher", DefaultHTTPAddr)
	fs.IntVar(&c.Workers, "workers", c.Env.Int("MOLT_PATCHER_WORKERS", DefaultWorkers), "how many sandboxes are patched at once (env MOLT_PATCHER_WORKERS)")
	fs.DurationVar(&c.PodReadyTimeout, "pod-ready-timeout", c.Env.Duration("MOLT_POD_READY_TIMEOUT", DefaultPodReadyTimeout),
		"how long a paused sandbox woken for its upgrade may take to have a Ready pod (env MOLT_POD_READY_TIMEOUT)")
}

// Validate reports the first setting that cannot work.
func (c *Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("flag --workers=%d: must be at least 1", c.Workers)
	}
	if c.PodReadyTimeout <= 0 {
		return fmt.Errorf("flag --pod-ready-timeout=%s: must be greater than 0", c.PodReadyTimeout)
	}
	return c.Options.Validate()
}
