package hookrunner

import (
	"flag"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where hookrunner serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9103"

// Config is everything hookrunner needs to run.
type Config struct {
	service.Options
}

// RegisterFlags adds hookrunner's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "hookrunner", DefaultHTTPAddr)
}
