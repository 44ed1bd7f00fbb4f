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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	agentsinformers "molt.dev/pkg/generated/informers/externalversions"
	agentslisters "molt.dev/pkg/generated/listers/agents/v1alpha1"
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
		Short: "Show an upgrade's progress; with -w, live until it ends (exit 0 Completed, 1 Failed, 3 nothing selected)",
		Long: `Show a SandboxUpdateOps's progress: updated/total, the count per stage, throughput and
ETA, the slowest sandboxes in flight and every failed sandbox with its reason and the
hook's stderr tail. In a terminal the view is redrawn in place; otherwise one line is
printed per change. -o json prints the summary as JSON (one object per change with -w).

Exit code: 0 when the ops is Completed (without -w: when it is not Failed), 1 when it
is Failed, 2 when the status could not be read, 3 when it completed without selecting
any sandbox (NothingSelected: its selector, stateFilter or namespace matches none, so
nothing was upgraded).`,
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

// source reads the ops and the sandboxes it claims.
type source interface {
	read(ctx context.Context) (*agentsv1alpha1.SandboxUpdateOps, []agentsv1alpha1.Sandbox, error)
}

// getSource reads both from the API server at each call (one look).
type getSource struct {
	agents   versioned.Interface
	ns, name string
}

func (g getSource) read(ctx context.Context) (*agentsv1alpha1.SandboxUpdateOps, []agentsv1alpha1.Sandbox, error) {
	ops, err := g.agents.AgentsV1alpha1().SandboxUpdateOps(g.ns).Get(ctx, g.name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	list, err := g.agents.AgentsV1alpha1().Sandboxes(g.ns).List(ctx, metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelUpdateOps + "=" + g.name})
	if err != nil {
		return nil, nil, fmt.Errorf("list the sandboxes of ops %s/%s: %w", g.ns, g.name, err)
	}
	return ops, list.Items, nil
}

// watchSource keeps both in informer caches: one list and one watch each,
// narrowed to the ops (by name) and its sandboxes (by label), so watching
// an upgrade of a thousand sandboxes does not list them every second.
type watchSource struct {
	ns, name  string
	ops       agentslisters.SandboxUpdateOpsLister
	sandboxes agentslisters.SandboxLister
}

func newWatchSource(ctx context.Context, agents versioned.Interface, ns, name string) (*watchSource, error) {
	opsFactory := agentsinformers.NewSharedInformerFactoryWithOptions(agents, 0, agentsinformers.WithNamespace(ns),
		agentsinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }))
	sbFactory := agentsinformers.NewSharedInformerFactoryWithOptions(agents, 0, agentsinformers.WithNamespace(ns),
		agentsinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = agentsv1alpha1.LabelUpdateOps + "=" + name }))
	w := &watchSource{ns: ns, name: name,
		ops:       opsFactory.Agents().V1alpha1().SandboxUpdateOps().Lister(),
		sandboxes: sbFactory.Agents().V1alpha1().Sandboxes().Lister(),
	}
	opsFactory.Start(ctx.Done())
	sbFactory.Start(ctx.Done())
	for _, f := range []agentsinformers.SharedInformerFactory{opsFactory, sbFactory} {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return nil, fmt.Errorf("watch %v of ops %s/%s: the cache did not sync (is the API server reachable? flags --kubeconfig, --context)", typ, ns, name)
			}
		}
	}
	return w, nil
}

func (w *watchSource) read(context.Context) (*agentsv1alpha1.SandboxUpdateOps, []agentsv1alpha1.Sandbox, error) {
	ops, err := w.ops.SandboxUpdateOps(w.ns).Get(w.name)
	if err != nil {
		return nil, nil, err
	}
	list, err := w.sandboxes.Sandboxes(w.ns).List(labels.Everything())
	if err != nil {
		return nil, nil, fmt.Errorf("list the sandboxes of ops %s/%s from the cache: %w", w.ns, w.name, err)
	}
	items := make([]agentsv1alpha1.Sandbox, len(list))
	for i, sb := range list {
		items[i] = *sb
	}
	return ops, items, nil
}

func (a *app) status(ctx context.Context, name string, o statusOptions) error {
	if o.output != "" && o.output != "json" {
		return &exitError{code: ExitError, msg: fmt.Sprintf("flag --output=%s: the only format is json", o.output)}
	}
	if o.interval <= 0 {
		return &exitError{code: ExitError, msg: fmt.Sprintf("flag --interval=%s: must be positive", o.interval)}
	}
	agents, kube, ns, err := a.clients()
	if err != nil {
		return err
	}
	tty := o.output == "" && isTerminal(a.out)
	color := o.color == "always" || (o.color == "auto" && tty)
	var src source = getSource{agents: agents, ns: ns, name: name}
	if o.watch {
		// The ops must exist before a watch can say anything about it.
		if _, err := agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return notFound(ns, name)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if src, err = newWatchSource(ctx, agents, ns, name); err != nil {
			return err
		}
	}
	if tty {
		fmt.Fprint(a.out, ansiHideCursor)
		defer fmt.Fprint(a.out, ansiShowCursor)
	}
	var (
		last       string
		seenFailed = map[string]bool{}
		said       = map[string]string{}
		warned     bool
		s          Summary
		lease      = &leaseLooker{kube: kube, namespaces: statusaggLeaseNamespaces}
		stale      string
	)
	for {
		ops, claimed, err := src.read(ctx)
		if err == nil {
			s = summarize(ops, claimed, time.Now(), o.slowest)
			if !s.Finished() {
				s.Stale = lease.look(ctx, time.Now())
			}
			withPodWaits(ctx, &s, func(ctx context.Context, name string) (*corev1.Pod, error) {
				return kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			})
		}
		switch {
		case apierrors.IsNotFound(err) && s.Name != "":
			// Deleted while watched: what it had done by then is the answer.
			return &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s was deleted while watched; last seen: %s. Its sandboxes were released: `kubectl get sbx -n %s -o wide` shows where each one is (a failed one is resumed by a new ops)",
				ns, name, plainLine(s), ns)}
		case apierrors.IsNotFound(err):
			return notFound(ns, name)
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
				fmt.Fprint(a.out, ansiHomeClear+fitScreen(renderScreen(s, color), terminalHeight(a.out)))
			default:
				for _, f := range s.FailedSandboxes {
					if !seenFailed[f.Name] {
						seenFailed[f.Name] = true
						fmt.Fprintf(a.out, "%s FAILED %s", time.Now().Format("15:04:05"), failedLine(f, false)[2:])
					}
				}
				// What a terminal shows under the bar (why it is paused,
				// waits, or warns), each time it changes; the counts line
				// stays the last.
				for _, c := range s.Conditions {
					if c.Type == agentsv1alpha1.ConditionProgressing && c.Reason == agentsv1alpha1.ProgressingReasonUpdating {
						continue // the counts, which the line below has
					}
					if said[c.Type] != c.Message {
						said[c.Type] = c.Message
						fmt.Fprintf(a.out, "%s %s: %s\n", time.Now().Format("15:04:05"), c.Type, c.Message)
					}
				}
				if s.Stale != stale {
					if stale = s.Stale; stale != "" {
						fmt.Fprintf(a.out, "%s warning: %s\n", time.Now().Format("15:04:05"), stale)
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

func notFound(ns, name string) error {
	return &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s not found (it may have been deleted): list the ops with `kubectl get suo -n %s`", ns, name, ns)}
}

// terminalHeight is the number of rows of w's terminal, 0 when unknown.
func terminalHeight(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	_, h, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return h
}

// statusExit is the exit of status: 1 for a Failed ops, with what to do
// next; 3 for one that completed without selecting any sandbox.
func (a *app) statusExit(s Summary, o statusOptions) error {
	if c := s.progressing(); s.Phase == string(agentsv1alpha1.SandboxUpdateOpsCompleted) && c != nil && c.Reason == agentsv1alpha1.ProgressingReasonNothingSelected {
		msg := ""
		if o.output != "json" {
			msg = fmt.Sprintf("SandboxUpdateOps %s/%s Completed without upgrading any sandbox (%s): %s", s.Namespace, s.Name, c.Reason, c.Message)
		}
		return &exitError{code: ExitNothingSelected, msg: msg}
	}
	if s.Phase != string(agentsv1alpha1.SandboxUpdateOpsFailed) {
		return nil
	}
	msg := ""
	if c := s.stopCause(); o.output != "json" && c != nil {
		// A spec that cannot work: a retry keeps it, and fails the same way.
		// Named as `kubectl get` and the README name it: InvalidPatch
		// (its condition's type), InvalidSpec (Progressing's reason).
		why := c.Reason
		if c.Type != agentsv1alpha1.ConditionProgressing {
			why = c.Type
		}
		msg = fmt.Sprintf("SandboxUpdateOps %s/%s Failed (%s): %s", s.Namespace, s.Name, why, c.Message)
	} else if o.output != "json" && s.ImageNotPulled != "" {
		msg = fmt.Sprintf("SandboxUpdateOps %s/%s Failed: %d of %d sandboxes failed, %d not started; %s", s.Namespace, s.Name, s.Failed, s.Total, s.NotStarted, s.ImageNotPulled)
	} else if o.output != "json" {
		msg = fmt.Sprintf("SandboxUpdateOps %s/%s Failed: %d of %d sandboxes failed, %d not started; read one's history with `kubectl molt history %s/SANDBOX`, fix the cause, then `kubectl molt retry %s -n %s` (it keeps this ops's patch and hooks: if one of them is the cause, create a new SandboxUpdateOps with it fixed instead)",
			s.Namespace, s.Name, s.Failed, s.Total, s.NotStarted, s.Namespace, s.Name, s.Namespace)
	}
	return &exitError{code: ExitFailed, msg: msg}
}

// progressing is the ops's Progressing condition, nil before statusagg
// wrote one.
func (s Summary) progressing() *Condition {
	for i, c := range s.Conditions {
		if c.Type == agentsv1alpha1.ConditionProgressing {
			return &s.Conditions[i]
		}
	}
	return nil
}

// stopCause is the condition of a spec that cannot work, nil for any other
// end: InvalidPatch (True), else a Progressing=False of reason InvalidSpec.
// Its message names the field and the next step (a new ops, not a retry).
func (s Summary) stopCause() *Condition {
	for _, invalid := range []func(Condition) bool{
		func(c Condition) bool { return c.Type == agentsv1alpha1.ConditionInvalidPatch },
		func(c Condition) bool {
			return c.Type == agentsv1alpha1.ConditionProgressing && c.Reason == agentsv1alpha1.ProgressingReasonInvalidSpec
		},
	} {
		for i, c := range s.Conditions {
			if invalid(c) {
				return &s.Conditions[i]
			}
		}
	}
	return nil
}
