package selector

import (
	"flag"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where selector serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9101"

// Config is everything selector needs to run.
type Config struct {
	service.Options
}

// RegisterFlags adds selector's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "selector", DefaultHTTPAddr)
}
