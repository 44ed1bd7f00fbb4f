// Command patcher is molt's patcher service. See internal/patcher for what it does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"molt.dev/services/patcher/internal/patcher"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "patcher:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("patcher", flag.ExitOnError)
	var cfg patcher.Config
	cfg.RegisterFlags(fs)
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return patcher.Run(ctx, cfg)
}
