package patcher

import (
	"flag"
	"fmt"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where patcher serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9102"

// Config is everything patcher needs to run.
type Config struct {
	service.Options
	// Workers is how many sandboxes are patched at once.
	Workers int
}

// RegisterFlags adds patcher's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "patcher", DefaultHTTPAddr)
	fs.IntVar(&c.Workers, "workers", c.Env.Int("MOLT_PATCHER_WORKERS", 16), "how many sandboxes are patched at once (env MOLT_PATCHER_WORKERS)")
}

// Validate reports the first setting that cannot work.
func (c *Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("flag --workers=%d: must be at least 1", c.Workers)
	}
	return c.Options.Validate()
}
