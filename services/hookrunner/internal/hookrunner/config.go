package hookrunner

import (
	"flag"
	"fmt"
	"time"

	"molt.dev/pkg/service"
)

// Flag defaults.
const (
	// DefaultHTTPAddr is where hookrunner serves /healthz, /readyz and /metrics by default.
	DefaultHTTPAddr = "127.0.0.1:9103"
	// DefaultMaxHooks is --max-hooks's default.
	DefaultMaxHooks = 64
	// DefaultReachWait is --runtime-reach-wait's default.
	DefaultReachWait = 15 * time.Second
)

// Config is everything hookrunner needs to run.
type Config struct {
	service.Options
	// MaxHooks bounds how many preUpgrade hooks, and how many postUpgrade hooks, run at
	// once (each with its event handlers; they have a consumer each).
	MaxHooks int
	// ReachWait is how long an unreachable agent-runtime is retried.
	ReachWait time.Duration
}

// RegisterFlags adds hookrunner's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "hookrunner", DefaultHTTPAddr)
	fs.IntVar(&c.MaxHooks, "max-hooks", c.Env.Int("MOLT_HOOKRUNNER_MAX_HOOKS", DefaultMaxHooks), "how many preUpgrade hooks run at once, and how many postUpgrade hooks (env MOLT_HOOKRUNNER_MAX_HOOKS)")
	fs.DurationVar(&c.ReachWait, "runtime-reach-wait", c.Env.Duration("MOLT_HOOKRUNNER_RUNTIME_REACH_WAIT", DefaultReachWait), "how long an agent-runtime that refuses connections is retried before the hook fails (env MOLT_HOOKRUNNER_RUNTIME_REACH_WAIT)")
}

// Validate reports the first setting that cannot work.
func (c *Config) Validate() error {
	if c.MaxHooks < 1 {
		return fmt.Errorf("flag --max-hooks=%d: must be at least 1", c.MaxHooks)
	}
	if c.ReachWait < 0 {
		return fmt.Errorf("flag --runtime-reach-wait=%s: must not be negative", c.ReachWait)
	}
	return c.Options.Validate()
}
