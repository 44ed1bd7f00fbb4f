// Command hookrunner is molt's hookrunner service. See internal/hookrunner for what it does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"molt.dev/services/hookrunner/internal/hookrunner"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hookrunner:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("hookrunner", flag.ExitOnError)
	var cfg hookrunner.Config
	cfg.RegisterFlags(fs)
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return hookrunner.Run(ctx, cfg)
}
