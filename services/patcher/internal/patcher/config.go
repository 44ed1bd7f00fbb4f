package patcher

import (
	"flag"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where patcher serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9102"

// Config is everything patcher needs to run.
type Config struct {
	service.Options
}

// RegisterFlags adds patcher's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "patcher", DefaultHTTPAddr)
}
