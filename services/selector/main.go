// Command selector is molt's selector service. See internal/selector for what it does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"molt.dev/services/selector/internal/selector"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "selector:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("selector", flag.ExitOnError)
	var cfg selector.Config
	cfg.RegisterFlags(fs)
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return selector.Run(ctx, cfg)
}
