// Command statusagg is molt's statusagg service. See internal/statusagg for what it does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"molt.dev/services/statusagg/internal/statusagg"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "statusagg:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("statusagg", flag.ExitOnError)
	var cfg statusagg.Config
	cfg.RegisterFlags(fs)
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return statusagg.Run(ctx, cfg)
}
