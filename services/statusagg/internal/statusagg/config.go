package statusagg

import (
	"flag"
	"fmt"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where statusagg serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9105"

// LeaseName is the Lease statusagg replicas elect their one writer with.
const LeaseName = "molt-statusagg"

// Defaults of statusagg's own flags.
const (
	DefaultSandboxWorkers = 4
	DefaultOpsWorkers     = 2
	DefaultEventWorkers   = 8
)

// Config is everything statusagg needs to run.
type Config struct {
	service.Options

	// SandboxWorkers is how many sandboxes' statuses are recomputed at once.
	SandboxWorkers int
	// OpsWorkers is how many SandboxUpdateOps' statuses are recomputed at once.
	OpsWorkers int
	// EventWorkers is how many events (of different sandboxes) are handled at once.
	EventWorkers int

	// LeaderElection makes replicas elect one writer of status, Events and
	// metrics (Lease LeaseName).
	LeaderElection service.LeaderElection
}

// RegisterFlags adds statusagg's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "statusagg", DefaultHTTPAddr)
	c.LeaderElection.RegisterFlags(fs, &c.Env, LeaseName)
	fs.IntVar(&c.SandboxWorkers, "sandbox-workers", c.Env.Int("MOLT_STATUSAGG_SANDBOX_WORKERS", DefaultSandboxWorkers),
		"sandbox statuses recomputed at once (env MOLT_STATUSAGG_SANDBOX_WORKERS)")
	fs.IntVar(&c.OpsWorkers, "ops-workers", c.Env.Int("MOLT_STATUSAGG_OPS_WORKERS", DefaultOpsWorkers),
		"SandboxUpdateOps statuses recomputed at once (env MOLT_STATUSAGG_OPS_WORKERS)")
	fs.IntVar(&c.EventWorkers, "event-workers", c.Env.Int("MOLT_STATUSAGG_EVENT_WORKERS", DefaultEventWorkers),
		"events of different sandboxes handled at once (env MOLT_STATUSAGG_EVENT_WORKERS)")
}

// Validate reports the first setting that cannot work, naming its flag.
func (c *Config) Validate() error {
	if err := c.LeaderElection.Validate(); err != nil {
		return err
	}
	if err := c.Options.Validate(); err != nil {
		return err
	}
	switch {
	case c.SandboxWorkers <= 0:
		return fmt.Errorf("flag --sandbox-workers=%d: must be greater than 0", c.SandboxWorkers)
	case c.OpsWorkers <= 0:
		return fmt.Errorf("flag --ops-workers=%d: must be greater than 0", c.OpsWorkers)
	case c.EventWorkers <= 0:
		return fmt.Errorf("flag --event-workers=%d: must be greater than 0", c.EventWorkers)
	}
	return nil
}
