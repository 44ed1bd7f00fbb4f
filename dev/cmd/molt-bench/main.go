// Command molt-bench measures molt on the local stack (`make up`): it
// upgrades sandboxes with an image-only patch in the shapes of issue 12
// (--shapes, --scale), and writes to a results file, beside issue 12's goals
// and the reference controller's figures: time from apply to Completed, API
// writes per sandbox by verb and resource, CPU per sandbox of every process,
// per-stage latency from the event history and peak RSS. It also measures
// the floor: how fast this API server accepts the minimal writes one upgrade
// needs, issued directly with client-go at full concurrency. It is a
// benchmark: it asserts nothing. With --faults it runs the faults check
// instead (faults.go), which does assert.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/client-go/kubernetes"

	versioned "molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/service"
)

type config struct {
	kubeconfig string
	natsURL    string
	// natsPasswordFile is the password of the NATS user viewer.
	natsPasswordFile string
	n                int
	shapes           string
	scale            bool
	floor            bool
	out              string
	qps              float64
	burst            int
	pidDir           string
	binDir           string
	timeout          time.Duration
	hookN            int
	hookSleep        int
	// faults runs the faults check (faults.go) instead of the shapes.
	faults bool
	fc     faultsConfig
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "molt-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var c config
	fs := flag.NewFlagSet("molt-bench", flag.ExitOnError)
	fs.StringVar(&c.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the local stack")
	fs.StringVar(&c.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS of the local stack")
	fs.StringVar(&c.natsPasswordFile, "nats-password-file", ".molt/nats-auth/viewer.password", "password of the NATS user viewer (the history's reader)")
	fs.IntVar(&c.n, "n", 1000, "base size: sandboxes of the 100pct and 10pct shapes; one is n/10, 10k is 10n, the replica runs n/2")
	fs.StringVar(&c.shapes, "shapes", defaultShapes, "comma-separated shapes to run, of "+defaultShapes+","+scaleShapes)
	fs.BoolVar(&c.scale, "scale", false, "also run the long shapes "+scaleShapes)
	fs.BoolVar(&c.floor, "floor", true, "also measure the floors: n sandboxes' minimal writes issued directly, and the one shape's pod replacements done one after the other without molt")
	fs.StringVar(&c.out, "out", "bench-results.md", "results file")
	fs.Float64Var(&c.qps, "kube-qps", 500, "client-side QPS of the benchmark's own client (setup and floor)")
	fs.IntVar(&c.burst, "kube-burst", 1000, "client-side burst of the benchmark's own client")
	fs.StringVar(&c.pidDir, "pid-dir", ".molt/pids", "pid files of the local stack (for CPU and peak RSS)")
	fs.StringVar(&c.binDir, "bin-dir", "bin", "where the services' binaries are (the replica runs start extra replicas)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up a run after this long")
	fs.IntVar(&c.hookN, "hook-n", 50, "sandboxes of the hook shape (0 skips it): a preUpgrade that sleeps, maxUnavailable 100%")
	fs.IntVar(&c.hookSleep, "hook-seconds", 2, "how long the hook shape's preUpgrade sleeps")
	fs.BoolVar(&c.faults, "faults", false, "run the faults check instead of the shapes: --faults-n sandboxes with backup/restore hooks upgrade while molt's services and NATS are killed with SIGKILL in turn; exits non-zero if an invariant breaks")
	fs.IntVar(&c.fc.n, "faults-n", 300, "sandboxes of the faults check")
	fs.DurationVar(&c.fc.every, "faults-every", 5*time.Second, "time between two kills of the faults check")
	fs.DurationVar(&c.fc.down, "faults-down", time.Second, "how long a killed process stays down")
	fs.IntVar(&c.fc.maxKills, "faults-kills", 100, "at most this many kills (the kills stop when the ops ends)")
	fs.BoolVar(&c.fc.wipeNATS, "faults-wipe-nats", false, "NATS's second kill also removes its store, as a NATS without a persistent volume loses it (recovery then waits for the stages' deadlines)")
	fs.IntVar(&c.fc.hookSeconds, "faults-hook-seconds", 5, "how long the faults check's backup hook sleeps")
	fs.StringVar(&c.fc.out, "faults-out", "faults-results.md", "report of the faults check")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if c.n < 1 {
		return fmt.Errorf("flag -n=%d: must be at least 1", c.n)
	}
	if c.scale {
		c.shapes += "," + scaleShapes
	}
	shapes, err := selectShapes(c.shapes, c.n, c.hookN, c.hookSleep)
	if err != nil {
		return err
	}
	pw, err := os.ReadFile(c.natsPasswordFile)
	if err != nil {
		return fmt.Errorf("flag --nats-password-file: %w (make up writes it)", err)
	}
	natsLogin = nats.UserInfo("viewer", strings.TrimSpace(string(pw)))
	rc, err := service.LoadRestConfig(c.kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = float32(c.qps), c.burst
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("build kubernetes client: %w", err)
	}
	agents, err := versioned.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("build agents client: %w", err)
	}
	b := &bench{cfg: c, kube: kube, agents: agents, restConfig: rc}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout*time.Duration(len(shapes)+1))
	defer cancel()

	// Namespaces of earlier runs may still be terminating: each run gets its own.
	runID := time.Now().Format("150405")
	if c.faults {
		if c.fc.n < 1 {
			return fmt.Errorf("flag --faults-n=%d: must be at least 1", c.fc.n)
		}
		return b.faultsRun(ctx, runID, c.fc)
	}
	var results []runResult
	for _, s := range shapes {
		r, err := b.upgradeRun(ctx, runID, s)
		if err != nil {
			return err
		}
		results = append(results, r)
		fmt.Printf("%s: %d sandboxes in %s (%s)\n", s.key, r.n, r.wall.Round(time.Millisecond), r.phase)
	}
	var floor *floorResult
	if c.floor {
		f, err := b.floorRun(ctx, "bench-"+runID+"-floor")
		if err != nil {
			return err
		}
		floor = &f
		fmt.Printf("floor: %s\n", f.wall.Round(time.Millisecond))
	}
	var serial *floorResult
	if one, ok := findShape(shapes, "one"); ok && c.floor {
		f, err := b.serialFloorRun(ctx, "bench-"+runID+"-floor-one", one.sandboxes())
		if err != nil {
			return err
		}
		serial = &f
		fmt.Printf("serial floor (one): %s\n", f.wall.Round(time.Millisecond))
	}
	rss := peakRSS(c.pidDir)
	if err := writeResults(c, results, floor, serial, rss); err != nil {
		return err
	}
	fmt.Printf("results written to %s\n", c.out)
	return nil
}
