package molt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	versioned "molt.dev/pkg/generated/clientset/versioned"
)

// Exit codes of kubectl molt.
const (
	// ExitOK: the command did what it says; for status, the ops is Completed
	// (or, without --watch, not Failed).
	ExitOK = 0
	// ExitFailed: status found the ops Failed.
	ExitFailed = 1
	// ExitError: the command could not do its work (a bad flag, the API
	// server or NATS unreachable, the object missing).
	ExitError = 2
	// ExitNothingSelected: status found the ops Completed without having
	// selected any sandbox (Progressing reason NothingSelected: a typo in
	// its selector, a stateFilter that leaves every one out, the wrong
	// namespace): nothing was upgraded.
	ExitNothingSelected = 3
)

// exitError carries an exit code through cobra; its message, if any, is
// printed on stderr.
type exitError struct {
	code int
	msg  string
	// notFound marks getOps's answer for an ops that does not exist.
	notFound bool
}

func (e *exitError) Error() string { return e.msg }

// app is what every subcommand shares: the kubectl flags and the streams.
type app struct {
	flags  *genericclioptions.ConfigFlags
	in     io.Reader
	out    io.Writer
	errOut io.Writer
}

// clients builds the clients from the kubectl flags, and the namespace they
// name (-n, else the kubeconfig context's, else default).
func (a *app) clients() (versioned.Interface, kubernetes.Interface, string, error) {
	cfg, err := a.flags.ToRESTConfig()
	if err != nil {
		return nil, nil, "", fmt.Errorf("load kubeconfig (flags --kubeconfig, --context): %w", err)
	}
	ns, _, err := a.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, nil, "", fmt.Errorf("read the namespace from the kubeconfig: %w", err)
	}
	agents, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, nil, "", fmt.Errorf("make the agents.kruise.io client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, "", fmt.Errorf("make the Kubernetes client: %w", err)
	}
	return agents, kube, ns, nil
}

// NewCommand returns the kubectl molt command with its subcommands.
func NewCommand(in io.Reader, out, errOut io.Writer) *cobra.Command {
	// --help lists the subcommands in the order an upgrade uses them.
	cobra.EnableCommandSorting = false
	a := &app{flags: genericclioptions.NewConfigFlags(true), in: in, out: out, errOut: errOut}
	root := &cobra.Command{
		Use: "molt",
		// kubectl runs the plugin as `kubectl molt`: usage lines say so.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl molt"},
		Short:       "Watch, preview and recover molt upgrades of agent sandboxes",
		Long: `kubectl molt shows and drives molt's upgrades of agent sandboxes
(SandboxUpdateOps, agents.kruise.io/v1alpha1):

  status OPS [-w]          a live view of an upgrade until it ends (exit 0 Completed, 1 Failed)
  history NS/SANDBOX       one sandbox's upgrade history, from the event stream
  plan -f ops.yaml         what an ops would do, changing nothing
  retry OPS                a new ops over what a Failed ops left failed or not started
  abort OPS                pause, wait for the sandboxes in flight, delete`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	a.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(newStatusCommand(a), newHistoryCommand(a), newPlanCommand(a), newRetryCommand(a), newAbortCommand(a))
	return root
}

// Main runs kubectl molt with args and returns its exit code. The first
// SIGINT or SIGTERM cancels the command's context.
func Main(args []string, in io.Reader, out, errOut io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := NewCommand(in, out, errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	var ee *exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintln(errOut, "error:", ee.msg)
		}
		return ee.code
	default:
		fmt.Fprintln(errOut, "error:", err)
		return ExitError
	}
}
