package service

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

// Main is the whole main() of a service: it registers the service's flags
// and klog's, parses the command line, runs until the first SIGTERM or
// interrupt cancels the context, and exits 1 naming the error.
// `<service> probe <url>` instead checks a URL and exits (see RunProbe).
func Main(name string, register func(*flag.FlagSet), run func(context.Context) error) {
	if len(os.Args) > 1 && os.Args[1] == ProbeCommand {
		os.Exit(RunProbe(name, os.Args[2:], os.Stdout, os.Stderr))
	}
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	register(fs)
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: a bad flag exits with usage
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
