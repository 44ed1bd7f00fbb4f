package podcycler

import (
	"flag"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where podcycler serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9104"

// Config is everything podcycler needs to run.
type Config struct {
	service.Options
}

// RegisterFlags adds podcycler's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "podcycler", DefaultHTTPAddr)
}
