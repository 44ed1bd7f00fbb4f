package statusagg

import (
	"flag"
	"fmt"
	"time"

	"molt.dev/pkg/service"
)

// DefaultHTTPAddr is where statusagg serves /healthz, /readyz and /metrics by default.
const DefaultHTTPAddr = "127.0.0.1:9105"

// LeaseName is the Lease statusagg replicas elect their one writer with.
const LeaseName = "molt-statusagg"

// Defaults of statusagg's own flags.
const (
	DefaultSandboxWorkers = 8
	DefaultOpsWorkers     = 2
	// Handlers mostly wait for their sandbox's coalesced write: about
	// Coalesce × the event rate of them wait at once.
	DefaultEventWorkers = 512
	// DefaultCoalesce: a stage that ends within a second of the one before
	// it is written together with the next one, so a sandbox whose upgrade
	// takes under a second costs one status write, and a fast stage (the
	// patch and a missing preUpgrade hook) no write of its own.
	DefaultCoalesce = time.Second
	// DefaultStartWindow is how soon an attempt's start and a pod's
	// changes are written (or Coalesce, if shorter): a user sees a sandbox
	// Upgrading within it, and the burst of a hook-less start (requested,
	// patched, prehook-done) still leaves in one write.
	DefaultStartWindow = 200 * time.Millisecond
	DefaultOpsInterval = time.Second

	DefaultPatchTimeout     = 30 * time.Second
	DefaultHookMargin       = 30 * time.Second
	DefaultPodReadyTimeout  = 5 * time.Minute
	DefaultRedrives         = 2
	DefaultWatchdogInterval = 5 * time.Second
	// DefaultSetProgressDeadline: a SandboxSet's Progressing turns False
	// when a member on its current revision has not been available for
	// this long (a Deployment's progressDeadlineSeconds is 10 minutes; a
	// warm pool's members are simpler).
	DefaultSetProgressDeadline = 5 * time.Minute
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

	// Coalesce is how long a sandbox's status write waits for more changes
	// (events, pod changes) of that sandbox.
	Coalesce time.Duration
	// StartWindow is how long an attempt's start, and a pod's change,
	// waits for more changes of its sandbox, when shorter than Coalesce
	// (0: DefaultStartWindow). Not a flag: tests widen it so that their
	// own pauses cannot outlast it.
	StartWindow time.Duration
	// OpsInterval is the least time between two writes of an ops's status
	// that do not change its phase.
	OpsInterval time.Duration
	// Deadlines bound every stage; the watchdog re-drives or fails what
	// passes them.
	Deadlines Deadlines

	// SetProgressDeadline is how long a member on a SandboxSet's current
	// revision may stay unavailable before the set's Progressing condition
	// turns False (0: DefaultSetProgressDeadline).
	SetProgressDeadline time.Duration

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
	fs.DurationVar(&c.Coalesce, "status-coalesce", c.Env.Duration("MOLT_STATUSAGG_STATUS_COALESCE", DefaultCoalesce),
		"how long a sandbox's status write waits to carry more of its changes at once: a stage shorter than this is written only with the next (an attempt's end is written at once) (env MOLT_STATUSAGG_STATUS_COALESCE)")
	fs.DurationVar(&c.OpsInterval, "ops-status-interval", c.Env.Duration("MOLT_STATUSAGG_OPS_STATUS_INTERVAL", DefaultOpsInterval),
		"least time between two writes of an ops's status that keep its phase; a phase change is written at once (env MOLT_STATUSAGG_OPS_STATUS_INTERVAL)")
	fs.DurationVar(&c.SetProgressDeadline, "set-progress-deadline", c.Env.Duration("MOLT_STATUSAGG_SET_PROGRESS_DEADLINE", DefaultSetProgressDeadline),
		"how long a member on a SandboxSet's current revision may stay unavailable before the set's Progressing condition turns False, reason MembersNotAvailable (env MOLT_STATUSAGG_SET_PROGRESS_DEADLINE)")
	d := &c.Deadlines
	fs.DurationVar(&d.Patch, "patch-timeout", c.Env.Duration("MOLT_STATUSAGG_PATCH_TIMEOUT", DefaultPatchTimeout),
		"time the patcher's part of PreUpgrade may take before the watchdog calls it stalled (env MOLT_STATUSAGG_PATCH_TIMEOUT)")
	fs.DurationVar(&d.HookMargin, "hook-margin", c.Env.Duration("MOLT_STATUSAGG_HOOK_MARGIN", DefaultHookMargin),
		"added to a hook's timeoutSeconds and to --pod-ready-timeout before a stage is stalled (env MOLT_STATUSAGG_HOOK_MARGIN)")
	fs.DurationVar(&d.PodReady, "pod-ready-timeout", c.Env.Duration("MOLT_POD_READY_TIMEOUT", DefaultPodReadyTimeout),
		"podcycler's --pod-ready-timeout: the UpgradePod stage's deadline before the margin (env MOLT_POD_READY_TIMEOUT)")
	fs.IntVar(&d.Redrives, "redrives", c.Env.Int("MOLT_STATUSAGG_REDRIVES", DefaultRedrives),
		"times a stalled stage is re-driven before it fails (env MOLT_STATUSAGG_REDRIVES)")
	fs.DurationVar(&d.Interval, "watchdog-interval", c.Env.Duration("MOLT_STATUSAGG_WATCHDOG_INTERVAL", DefaultWatchdogInterval),
		"how often the watchdog looks for stalled stages (env MOLT_STATUSAGG_WATCHDOG_INTERVAL)")
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
	case c.Coalesce < 0:
		return fmt.Errorf("flag --status-coalesce=%s: must not be negative", c.Coalesce)
	case c.StartWindow < 0:
		return fmt.Errorf("StartWindow=%s: must not be negative", c.StartWindow)
	case c.OpsInterval < 0:
		return fmt.Errorf("flag --ops-status-interval=%s: must not be negative", c.OpsInterval)
	case c.SetProgressDeadline < 0:
		return fmt.Errorf("flag --set-progress-deadline=%s: must not be negative", c.SetProgressDeadline)
	case c.Deadlines.Patch < 0:
		return fmt.Errorf("flag --patch-timeout=%s: must not be negative", c.Deadlines.Patch)
	case c.Deadlines.HookMargin < 0:
		return fmt.Errorf("flag --hook-margin=%s: must not be negative", c.Deadlines.HookMargin)
	case c.Deadlines.PodReady < 0:
		return fmt.Errorf("flag --pod-ready-timeout=%s: must not be negative", c.Deadlines.PodReady)
	case c.Deadlines.Redrives < 0:
		return fmt.Errorf("flag --redrives=%d: must not be negative", c.Deadlines.Redrives)
	case c.Deadlines.Interval < 0:
		return fmt.Errorf("flag --watchdog-interval=%s: must not be negative", c.Deadlines.Interval)
	}
	return nil
}

// orDefaults returns d with every zero field set to its default (a Config
// built in code, as tests do, need not name them all).
func (d Deadlines) orDefaults() Deadlines {
	if d.Patch == 0 {
		d.Patch = DefaultPatchTimeout
	}
	if d.HookMargin == 0 {
		d.HookMargin = DefaultHookMargin
	}
	if d.PodReady == 0 {
		d.PodReady = DefaultPodReadyTimeout
	}
	if d.Redrives == 0 {
		d.Redrives = DefaultRedrives
	}
	if d.Interval == 0 {
		d.Interval = DefaultWatchdogInterval
	}
	return d
}
