// Command molt-devnode is the development node agent of the local stack: it
// does for kwok's fake nodes what kwok's stages should not (see dev/devnode).
//
//	molt-devnode --kubeconfig K [--health-addr A]
//	    run the reaper (and, with --health-addr, serve /healthz on A: 200
//	    while the API server answers)
//	molt-devnode probe URL
//	    GET URL; exit 0 on a 2xx answer, 1 otherwise (a health check for
//	    images without a shell)
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

	"molt.dev/dev/devhealth"
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
	if len(os.Args) > 1 && os.Args[1] == service.ProbeCommand {
		os.Exit(service.RunProbe("molt-devnode", os.Args[2:], os.Stdout, os.Stderr))
	}
	fs := flag.NewFlagSet("molt-devnode", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "path to the local cluster's kubeconfig (env KUBECONFIG)")
	healthAddr := fs.String("health-addr", "", "address to serve /healthz on (200 while the API server answers); empty: none")
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	cfg, err := service.LoadRestConfig(*kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	kube, err := kubernetes.NewForConfig(service.ProtobufConfig(cfg))
	if err != nil {
		return fmt.Errorf("build kubernetes client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *healthAddr != "" {
		if err := devhealth.Serve(ctx, *healthAddr, kube); err != nil {
			return err
		}
	}
	if err := devnode.RunReaper(ctx, kube); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
