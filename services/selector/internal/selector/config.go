package selector

import (
	"flag"
	"fmt"
	"time"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where selector serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9101"

// LeaseName is the Lease selector replicas elect their one admitting leader with.
const LeaseName = "molt-selector"

// Defaults of selector's own flags.
const (
	DefaultWorkers        = 2
	DefaultRepublishAfter = 30 * time.Second
)

// Config is everything selector needs to run.
type Config struct {
	service.Options

	// LeaderElection makes replicas elect one leader (Lease LeaseName);
	// only the leader watches and admits.
	LeaderElection service.LeaderElection
	// Workers is how many ops are reconciled at once.
	Workers int
	// RepublishAfter is how long an admitted sandbox (or a direct attempt)
	// may go without its status describing the attempt before `requested`
	// is published again (the message id is deterministic, so a copy
	// inside the stream's duplicate window is dropped).
	RepublishAfter time.Duration
}

// RegisterFlags adds selector's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "selector", DefaultHTTPAddr)
	c.LeaderElection.RegisterFlags(fs, &c.Env, LeaseName)
	fs.IntVar(&c.Workers, "workers", c.Env.Int("MOLT_SELECTOR_WORKERS", DefaultWorkers),
		"SandboxUpdateOps reconciled at once (env MOLT_SELECTOR_WORKERS)")
	fs.DurationVar(&c.RepublishAfter, "republish-after", c.Env.Duration("MOLT_SELECTOR_REPUBLISH_AFTER", DefaultRepublishAfter),
		"publish `requested` again for an admitted sandbox (or a direct upgrade) whose status does not show the attempt after this long (env MOLT_SELECTOR_REPUBLISH_AFTER)")
}

// Validate reports the first setting that cannot work, naming its flag.
func (c *Config) Validate() error {
	if err := c.Options.Validate(); err != nil {
		return err
	}
	if err := c.LeaderElection.Validate(); err != nil {
		return err
	}
	switch {
	case c.Workers <= 0:
		return fmt.Errorf("flag --workers=%d: must be greater than 0", c.Workers)
	case c.RepublishAfter <= 0:
		return fmt.Errorf("flag --republish-after=%s: must be greater than 0", c.RepublishAfter)
	}
	return nil
}
