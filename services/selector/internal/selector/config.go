package selector

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where selector serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9101"

// LeaseName is the Lease selector replicas elect their one admitting leader with.
const LeaseName = "molt-selector"

// Defaults of selector's own flags.
const (
	DefaultLeaderElectionNamespace = "kube-system"
	DefaultWorkers                 = 2
	DefaultRepublishAfter          = 30 * time.Second
)

// Config is everything selector needs to run.
type Config struct {
	service.Options

	// LeaderElect makes replicas elect one leader (Lease LeaseName); only
	// the leader watches and admits. Off only for a single replica or tests.
	LeaderElect bool
	// LeaderElectionNamespace is the namespace of the Lease.
	LeaderElectionNamespace string
	// Workers is how many ops are reconciled at once.
	Workers int
	// RepublishAfter is how long an admitted sandbox may go without its
	// status describing the attempt before `requested` is published again
	// (the message id is deterministic, so a copy inside the stream's
	// duplicate window is dropped).
	RepublishAfter time.Duration

	envErrs []error
}

// RegisterFlags adds selector's flags (with environment fallbacks) to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Options.RegisterFlags(fs, "selector", DefaultHTTPAddr)
	fs.BoolVar(&c.LeaderElect, "leader-elect", c.envBool("MOLT_LEADER_ELECT", true),
		"elect one admitting replica through the Lease "+LeaseName+" (env MOLT_LEADER_ELECT)")
	fs.StringVar(&c.LeaderElectionNamespace, "leader-election-namespace", c.envString("MOLT_LEADER_ELECTION_NAMESPACE", DefaultLeaderElectionNamespace),
		"namespace of the leader election Lease (env MOLT_LEADER_ELECTION_NAMESPACE)")
	fs.IntVar(&c.Workers, "workers", c.envInt("MOLT_SELECTOR_WORKERS", DefaultWorkers),
		"SandboxUpdateOps reconciled at once (env MOLT_SELECTOR_WORKERS)")
	fs.DurationVar(&c.RepublishAfter, "republish-after", c.envDuration("MOLT_REPUBLISH_AFTER", DefaultRepublishAfter),
		"publish `requested` again for an admitted sandbox whose status does not show the attempt after this long (env MOLT_REPUBLISH_AFTER)")
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
	case c.LeaderElect && c.LeaderElectionNamespace == "":
		return fmt.Errorf("flag --leader-election-namespace: must not be empty with --leader-elect")
	case c.Workers <= 0:
		return fmt.Errorf("flag --workers=%d: must be greater than 0", c.Workers)
	case c.RepublishAfter <= 0:
		return fmt.Errorf("flag --republish-after=%s: must be greater than 0", c.RepublishAfter)
	}
	return nil
}

func (c *Config) envString(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func (c *Config) envBool(key string, def bool) bool {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("env %s=%q: not true or false", key, v))
		return def
	}
	return b
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

func (c *Config) envDuration(key string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("env %s=%q: not a duration such as 30s", key, v))
		return def
	}
	return d
}
