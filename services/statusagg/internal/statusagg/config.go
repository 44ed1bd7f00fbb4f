package statusagg

import (
	"flag"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where statusagg serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9105"

// Config is everything statusagg needs to run.
type Config struct {
	service.Options
}

// RegisterFlags adds statusagg's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "statusagg", DefaultHTTPAddr)
}
