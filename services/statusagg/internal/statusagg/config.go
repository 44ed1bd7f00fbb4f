package statusagg

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where statusagg serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9105"

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

	envErrs []error
}

// RegisterFlags adds statusagg's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "statusagg", DefaultHTTPAddr)
	fs.IntVar(&c.SandboxWorkers, "sandbox-workers", c.envInt("MOLT_STATUSAGG_SANDBOX_WORKERS", DefaultSandboxWorkers),
		"sandbox statuses recomputed at once (env MOLT_STATUSAGG_SANDBOX_WORKERS)")
	fs.IntVar(&c.OpsWorkers, "ops-workers", c.envInt("MOLT_STATUSAGG_OPS_WORKERS", DefaultOpsWorkers),
		"SandboxUpdateOps statuses recomputed at once (env MOLT_STATUSAGG_OPS_WORKERS)")
	fs.IntVar(&c.EventWorkers, "event-workers", c.envInt("MOLT_STATUSAGG_EVENT_WORKERS", DefaultEventWorkers),
		"events of different sandboxes handled at once (env MOLT_STATUSAGG_EVENT_WORKERS)")
}

// Validate reports the first setting that cannot work, naming its flag.
func (c *Config) Validate() error {
	if len(c.envErrs) > 0 {
		return errors.Join(c.envErrs...)
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

func (c *Config) envInt(key string, def int) int {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("env %s=%q: not an integer", key, v))
		return def
	}
	return n
}
