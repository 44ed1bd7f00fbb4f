// Command podcycler is molt's podcycler service. See internal/podcycler for what it does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"molt.dev/services/podcycler/internal/podcycler"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "podcycler:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("podcycler", flag.ExitOnError)
	var cfg podcycler.Config
	cfg.RegisterFlags(fs)
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return podcycler.Run(ctx, cfg)
}
