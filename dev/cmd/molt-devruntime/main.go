// Command molt-devruntime is the development agent-runtime of the local
// stack (see dev/devruntime).
//
//	molt-devruntime serve --kubeconfig K --state-dir D [--port 49983] [--keepalive 5s] [--health-addr A]
//	    serve the envd process protocol on <podIP>:49983 for every running pod
//	    (and, with --health-addr, /healthz on A: 200 while the API server answers)
//	molt-devruntime exec --kubeconfig K [--namespace NS] --sandbox NAME [--timeout 2m] -- COMMAND...
//	    run COMMAND in a sandbox through the protocol, as a lifecycle hook runs,
//	    with the token of the sandbox's runtime-access-token annotation (the
//	    runtime refuses any call without it); print its stdout and stderr and
//	    exit with its exit code
//	molt-devruntime probe URL
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
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"molt.dev/dev/devhealth"
	"molt.dev/dev/devruntime"
	"molt.dev/pkg/agentruntime"
	"molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/service"
)

const usage = `usage:
  molt-devruntime serve --kubeconfig K --state-dir D [--port 49983] [--keepalive 5s] [--health-addr A]
  molt-devruntime exec --kubeconfig K [--namespace NS] --sandbox NAME [--timeout 2m] -- COMMAND...
  molt-devruntime probe URL`

// exitError carries the exit code of a command run by exec.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit code %d", e.code) }

func main() {
	devruntime.MaybeRunInit()
	err := run(os.Args[1:])
	var exit exitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "molt-devruntime:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	if args[0] == service.ProbeCommand {
		if code := service.RunProbe("molt-devruntime", args[1:], os.Stdout, os.Stderr); code != 0 {
			return exitError{code: code}
		}
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:])
	case "exec":
		return execCommand(ctx, args[1:])
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "path to the local cluster's kubeconfig (env KUBECONFIG)")
	stateDir := fs.String("state-dir", os.Getenv("MOLT_DEVRUNTIME_STATE_DIR"), "directory of the pods' roots and volumes (env MOLT_DEVRUNTIME_STATE_DIR)")
	port := fs.Int("port", agentruntime.Port, "port of every pod's agent-runtime")
	keepalive := fs.Duration("keepalive", devruntime.DefaultKeepalive, "keepalive period of a running command's stream")
	healthAddr := fs.String("health-addr", "", "address to serve /healthz on (200 while the API server answers); empty: none")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *stateDir == "" {
		return errors.New("--state-dir is required")
	}
	if *keepalive <= 0 {
		return fmt.Errorf("--keepalive %s: must be positive", *keepalive)
	}
	cfg, err := service.LoadRestConfig(*kubeconfig)
	if err != nil {
		return err
	}
	kube, agents, err := clients(cfg)
	if err != nil {
		return err
	}
	if *healthAddr != "" {
		if err := devhealth.Serve(ctx, *healthAddr, kube); err != nil {
			return err
		}
	}
	err = devruntime.Serve(ctx, devruntime.Config{Kube: kube, Agents: agents, StateDir: *stateDir, Port: *port, Keepalive: *keepalive})
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func execCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("exec", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "path to the local cluster's kubeconfig (env KUBECONFIG)")
	namespace := fs.String("namespace", "default", "namespace of the sandbox (also -n)")
	fs.StringVar(namespace, "n", "default", "namespace of the sandbox (short for --namespace)")
	sandbox := fs.String("sandbox", "", "name of the sandbox (required)")
	timeout := fs.Duration("timeout", 2*time.Minute, "deadline of the whole call")
	if err := fs.Parse(args); err != nil {
		return err
	}
	command := fs.Args()
	switch {
	case *sandbox == "":
		return errors.New("--sandbox is required")
	case len(command) == 0:
		return errors.New("no command: give it after --")
	}
	cfg, err := service.LoadRestConfig(*kubeconfig)
	if err != nil {
		return err
	}
	kube, agents, err := clients(cfg)
	if err != nil {
		return err
	}
	baseURL, token, err := devruntime.SandboxEndpoint(ctx, kube, agents, *namespace, *sandbox)
	if err != nil {
		return err
	}
	res, err := agentruntime.Exec(ctx, agentruntime.ExecRequest{
		BaseURL: baseURL, AccessToken: token, Command: command, Timeout: *timeout,
		Stdout: os.Stdout, Stderr: os.Stderr,
	})
	if err != nil {
		return errors.New(agentruntime.ErrorMessage(err))
	}
	switch {
	case res.Succeeded():
		return nil
	case res.Exited:
		return exitError{code: int(res.ExitCode)}
	default:
		return errors.New(res.FailureMessage())
	}
}

func clients(cfg *rest.Config) (kubernetes.Interface, versioned.Interface, error) {
	// The runtime asks the API server on its rare paths (a token or an
	// address its cache cannot confirm), but then for many pods at once:
	// client-go's default of 5 a second would make them time out.
	cfg.QPS, cfg.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(service.ProtobufConfig(cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("build kubernetes client: %w", err)
	}
	agents, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("build agents client: %w", err)
	}
	return kube, agents, nil
}
