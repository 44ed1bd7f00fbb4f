// Command molt-devnode is the development node agent of the local stack: it
// does for kwok's fake nodes what kwok's stages should not (see dev/devnode).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"molt.dev/dev/devnode"
	"molt.dev/pkg/service"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "molt-devnode:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("molt-devnode", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "path to the local cluster's kubeconfig (env KUBECONFIG)")
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	cfg, err := service.LoadRestConfig(*kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("build kubernetes client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := devnode.RunReaper(ctx, kube); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
