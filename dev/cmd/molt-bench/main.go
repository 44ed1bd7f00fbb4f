// Command molt-bench measures molt on the local stack (`make up`): it
// upgrades N sandboxes with an image-only patch, once per maxUnavailable
// setting, and writes what it measured to a results file. It also measures
// the floor: how fast this API server accepts the minimal writes one upgrade
// needs, issued directly with client-go at full concurrency, and reports
// molt's time as a ratio to it. It is a benchmark: it asserts nothing.
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

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"

	versioned "molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/service"
)

type config struct {
	kubeconfig string
	natsURL    string
	// natsPasswordFile is the password of the NATS user viewer.
	natsPasswordFile string
	n                int
	maxUnavail       string
	out              string
	qps              float64
	burst            int
	pidDir           string
	timeout          time.Duration
	hookN            int
	hookSleep        int
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
	fs.IntVar(&c.n, "n", 1000, "how many sandboxes to upgrade")
	fs.StringVar(&c.maxUnavail, "max-unavailable", "100%,10%", "comma-separated maxUnavailable settings, one run each")
	fs.StringVar(&c.out, "out", "bench-results.md", "results file")
	fs.Float64Var(&c.qps, "kube-qps", 500, "client-side QPS of the benchmark's own client (setup and floor)")
	fs.IntVar(&c.burst, "kube-burst", 1000, "client-side burst of the benchmark's own client")
	fs.StringVar(&c.pidDir, "pid-dir", ".molt/pids", "pid files of the local stack (for peak RSS)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up a run after this long")
	fs.IntVar(&c.hookN, "hook-n", 50, "sandboxes of the hook run (0 skips it): a preUpgrade that sleeps, maxUnavailable 100%")
	fs.IntVar(&c.hookSleep, "hook-seconds", 2, "how long the hook run's preUpgrade sleeps")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if c.n < 1 {
		return fmt.Errorf("flag -n=%d: must be at least 1", c.n)
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
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout*time.Duration(len(strings.Split(c.maxUnavail, ","))+1))
	defer cancel()

	// Namespaces of earlier runs may still be terminating: each run gets its own.
	runID := time.Now().Format("150405")
	var results []runResult
	for i, mu := range strings.Split(c.maxUnavail, ",") {
		r, err := b.upgradeRun(ctx, fmt.Sprintf("bench-%s-%d", runID, i), strings.TrimSpace(mu), c.n, nil)
		if err != nil {
			return err
		}
		results = append(results, r)
		fmt.Printf("maxUnavailable %s: %d sandboxes in %s\n", r.maxUnavailable, c.n, r.wall.Round(time.Millisecond))
	}
	if c.hookN > 0 {
		hook := &agentsv1alpha1.UpgradeAction{
			Exec:           &agentsv1alpha1.ExecAction{Command: []string{"/bin/bash", "-c", fmt.Sprintf("sleep %d", c.hookSleep)}},
			TimeoutSeconds: int32(c.hookSleep + 60),
		}
		r, err := b.upgradeRun(ctx, fmt.Sprintf("bench-%s-hook", runID), "100%", c.hookN, hook)
		if err != nil {
			return err
		}
		results = append(results, r)
		fmt.Printf("hook run: %d sandboxes with a %ds preUpgrade in %s\n", c.hookN, c.hookSleep, r.wall.Round(time.Millisecond))
	}
	floor, err := b.floorRun(ctx, "bench-"+runID+"-floor")
	if err != nil {
		return err
	}
	fmt.Printf("floor: %s\n", floor.wall.Round(time.Millisecond))
	rss := peakRSS(c.pidDir)
	if err := writeResults(c, results, floor, rss); err != nil {
		return err
	}
	fmt.Printf("results written to %s\n", c.out)
	return nil
}
