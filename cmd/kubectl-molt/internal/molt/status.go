package molt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
)

type statusOptions struct {
	watch    bool
	output   string
	interval time.Duration
	slowest  int
	color    string
}

func newStatusCommand(a *app) *cobra.Command {
	o := statusOptions{}
	cmd := &cobra.Command{
		Use:   "status OPS",
		Short: "Show an upgrade's progress; with -w, live until it ends (exit 0 Completed, 1 Failed)",
		Long: `Show a SandboxUpdateOps's progress: updated/total, the count per stage, throughput and
ETA, the slowest sandboxes in flight and every failed sandbox with its reason and the
hook's stderr tail. In a terminal the view is redrawn in place; otherwise one line is
printed per change. -o json prints the summary as JSON (one object per change with -w).

Exit code: 0 when the ops is Completed (without -w: when it is not Failed), 1 when it
is Failed, 2 when the status could not be read.`,
		Example: `  kubectl molt status upgrade-my-sandboxes -w
  kubectl molt status upgrade-my-sandboxes -w && echo upgraded
  kubectl molt status upgrade-my-sandboxes -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.status(cmd.Context(), args[0], o)
		},
	}
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "keep watching until the ops is Completed or Failed")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: json for the machine-readable summary")
	cmd.Flags().DurationVar(&o.interval, "interval", time.Second, "how often to read the ops and its sandboxes while watching")
	cmd.Flags().IntVar(&o.slowest, "slowest", 5, "how many of the slowest sandboxes in flight to show")
	cmd.Flags().StringVar(&o.color, "color", "auto", "colour the terminal view: auto (when stdout is a terminal), always, never")
	return cmd
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// snapshot reads the ops and the sandboxes it claims, and summarizes them.
func snapshot(ctx context.Context, agents versioned.Interface, ns, name string, slowest int) (Summary, error) {
	ops, err := agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Summary{}, err
	}
	list, err := agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelUpdateOps + "=" + name})
	if err != nil {
		return Summary{}, fmt.Errorf("list the sandboxes of ops %s/%s: %w", ns, name, err)
	}
	return summarize(ops, list.Items, time.Now(), slowest), nil
}

func (a *app) status(ctx context.Context, name string, o statusOptions) error {
	if o.output != "" && o.output != "json" {
		return &exitError{code: ExitError, msg: fmt.Sprintf("flag --output=%s: the only format is json", o.output)}
	}
	if o.interval <= 0 {
		return &exitError{code: ExitError, msg: fmt.Sprintf("flag --interval=%s: must be positive", o.interval)}
	}
	agents, _, ns, err := a.clients()
	if err != nil {
		return err
	}
	tty := o.output == "" && isTerminal(a.out)
	color := o.color == "always" || (o.color == "auto" && tty)
	var (
		last       string
		seenFailed = map[string]bool{}
		warned     bool
		s          Summary
	)
	for {
		s, err = snapshot(ctx, agents, ns, name, o.slowest)
		switch {
		case apierrors.IsNotFound(err):
			return &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s not found (it may have been deleted): list the ops with `kubectl get suo -n %s`", ns, name, ns)}
		case err != nil && !o.watch:
			return fmt.Errorf("read SandboxUpdateOps %s/%s: %w (is the API server reachable? flags --kubeconfig, --context)", ns, name, err)
		case err != nil:
			if !warned {
				fmt.Fprintf(a.errOut, "warning: read SandboxUpdateOps %s/%s: %v (retrying every %s)\n", ns, name, err, o.interval)
				warned = true
			}
		default:
			warned = false
			switch {
			case o.output == "json":
				line, _ := json.Marshal(s)
				if string(line) != last || !o.watch {
					fmt.Fprintln(a.out, string(line))
					last = string(line)
				}
			case tty:
				fmt.Fprint(a.out, ansiHomeClear+renderScreen(s, color))
			default:
				for _, f := range s.FailedSandboxes {
					if !seenFailed[f.Name] {
						seenFailed[f.Name] = true
						fmt.Fprintf(a.out, "%s FAILED %s", time.Now().Format("15:04:05"), failedLine(f, false)[2:])
					}
				}
				if line := plainLine(s); line != last || !o.watch {
					fmt.Fprintf(a.out, "%s %s%s\n", time.Now().Format("15:04:05"), line, plainExtra(s))
					last = line
				}
			}
			if !o.watch || s.Finished() {
				return a.statusExit(s, o)
			}
		}
		select {
		case <-ctx.Done():
			return &exitError{code: ExitError, msg: fmt.Sprintf("stopped watching SandboxUpdateOps %s/%s (%s)", ns, name, s.Phase)}
		case <-time.After(o.interval):
		}
	}
}

// statusExit is the exit of status: 1 for a Failed ops, with what to do next.
func (a *app) statusExit(s Summary, o statusOptions) error {
	if s.Phase != string(agentsv1alpha1.SandboxUpdateOpsFailed) {
		return nil
	}
	msg := ""
	if o.output != "json" {
		msg = fmt.Sprintf("SandboxUpdateOps %s/%s Failed: %d of %d sandboxes failed, %d not started; read one's history with `kubectl molt history %s/SANDBOX`, fix the cause, then `kubectl molt retry %s -n %s`",
			s.Namespace, s.Name, s.Failed, s.Total, s.NotStarted, s.Namespace, s.Name, s.Namespace)
	}
	return &exitError{code: ExitFailed, msg: msg}
}
