package molt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
)

type historyOptions struct {
	nats   natsOptions
	follow bool
	output string
}

func newHistoryCommand(a *app) *cobra.Command {
	o := historyOptions{}
	cmd := &cobra.Command{
		Use:   "history [NAMESPACE/]SANDBOX",
		Short: "Show a sandbox's upgrade history from the event stream: every event of every attempt, stage durations, hook output",
		Long: `Read one sandbox's whole upgrade history from molt's JetStream stream (MOLT_EVENTS):
every event of every attempt in order, with its time, the time since the previous one,
the stage it belongs to, the pods involved and, for a failure, the reason and the hook's
output tails; then the time spent in each stage. --follow keeps printing new events.

It logs in to NATS as the read-only user viewer (flags --nats-*); the defaults fit
` + "`make up`" + `: its password is read beside its kubeconfig (.molt/kubeconfig), or from
.molt in the current directory.`,
		Example: `  kubectl molt history default/box-3
  kubectl molt history box-3 -n default --follow
  # a cluster's NATS, through a port-forward (NetworkPolicy admits only molt's pods):
  kubectl -n molt-system port-forward svc/nats 4222:4222 &
  kubectl -n molt-system get secret molt-nats-viewer -o jsonpath='{.data.password}' | base64 -d > viewer.password
  kubectl molt history default/box-3 --nats-password-file viewer.password`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.history(cmd.Context(), args[0], o)
		},
	}
	o.nats.register(cmd)
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep printing new events as they arrive")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: json for one CloudEvent data object per line")
	return cmd
}

// parseSandboxArg reads NAMESPACE/SANDBOX, or SANDBOX in the -n namespace.
func (a *app) sandboxArg(arg string) (ns, name string, err error) {
	if ns, name, ok := strings.Cut(arg, "/"); ok {
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return "", "", &exitError{code: ExitError, msg: fmt.Sprintf("argument %q: want NAMESPACE/SANDBOX or SANDBOX with -n", arg)}
		}
		return ns, name, nil
	}
	ns, _, err = a.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", "", fmt.Errorf("read the namespace from the kubeconfig: %w", err)
	}
	return ns, arg, nil
}

func (a *app) history(ctx context.Context, arg string, o historyOptions) error {
	if o.output != "" && o.output != "json" {
		return &exitError{code: ExitError, msg: fmt.Sprintf("flag --output=%s: the only format is json", o.output)}
	}
	ns, name, err := a.sandboxArg(arg)
	if err != nil {
		return err
	}
	if a.flags.KubeConfig != nil {
		o.nats.kubeconfig = *a.flags.KubeConfig
	}
	nc, err := o.nats.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("open JetStream on %s: %w", redact(o.nats.url), err)
	}
	stream, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		return fmt.Errorf("open stream %s on NATS at %s: %w; molt's services create it when they start: are they running against this NATS?", events.StreamName, redact(o.nats.url), err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SandboxHistorySubject(ns, name)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("read the history of sandbox %s/%s from stream %s: %w", ns, name, events.StreamName, err)
	}
	current, missing := a.lookupSandbox(ctx, ns, name)
	h := &historyPrinter{out: a.out, json: o.output == "json", loc: time.Local, current: current}
	if !h.json {
		// Printed with the first event, so that a name with no history
		// reads as one line, or at once when following (events may be long
		// in coming).
		h.title = fmt.Sprintf("History of sandbox %s/%s (stream %s)\n", ns, name, events.StreamName)
		if o.follow {
			h.printTitle()
		}
	}
	caughtUp := false
	for {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return fmt.Errorf("read the history of sandbox %s/%s: %w", ns, name, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, mdErr := msg.Metadata()
			ev, decErr := events.Decode(msg.Data())
			if decErr != nil {
				fmt.Fprintf(a.errOut, "warning: skipped a message on %s that is not a molt event: %v\n", msg.Subject(), decErr)
			} else {
				h.add(ev)
			}
			if mdErr == nil && md.NumPending == 0 {
				caughtUp = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("read the history of sandbox %s/%s: %w", ns, name, err)
		}
		if n == 0 {
			caughtUp = true
		}
		if caughtUp && !h.json {
			// Show what arrived; the stage durations of an attempt still in
			// progress only once the history is read (not while following).
			h.flush(!o.follow)
		}
		if caughtUp && !o.follow {
			if h.count == 0 && !h.json {
				if missing {
					return &exitError{code: ExitError, msg: fmt.Sprintf("no events for sandbox %s/%s, and no such sandbox in the cluster: check the namespace and the name (`kubectl get sbx -n %s`)", ns, name, ns)}
				}
				keeps := "as long as the stream keeps events"
				if age := stream.CachedInfo().Config.MaxAge; age > 0 {
					keeps = "it keeps " + age.String()
				}
				fmt.Fprintf(a.out, "no events: sandbox %s/%s has not been upgraded since the stream's history began (%s)\n", ns, name, keeps)
			}
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// lookupSandbox asks the API server, once, for the sandbox ns/name: its UID
// ("" when there is none or it cannot be asked), and missing when the server
// says there is none (false when it cannot be asked: history needs only NATS).
func (a *app) lookupSandbox(ctx context.Context, ns, name string) (uid types.UID, missing bool) {
	agents, _, _, err := a.clients()
	if err != nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sb, err := agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", apierrors.IsNotFound(err)
	}
	return sb.UID, false
}

// historyPrinter prints events grouped by attempt, and each attempt's
// stage durations once it has ended (or, for one in progress, when the
// history has been read).
type historyPrinter struct {
	out  io.Writer
	json bool
	loc  *time.Location // times are printed in it (the local zone)
	// current is the UID of the sandbox of this name in the cluster ("" when
	// unknown); sandbox is the UID the last attempt printed was of. The
	// stream keeps the events of an earlier sandbox of the same name.
	current, sandbox types.UID
	title            string // printed once, before the first event
	count            int
	attempt          string
	tw               *tabwriter.Writer
	header           bool // the attempt's column header is printed
	prev             time.Time
	spans            []stageSpan
	ended            string
	printed          bool // the attempt's stage durations are printed
	// start is the attempt's first event's time; resumed is true when the
	// attempt continues a failed one; started is true once one of its
	// stages has started (stage-started).
	start            time.Time
	resumed, started bool
}

// stageSpan is the first and last event time of one stage of one attempt.
type stageSpan struct {
	stage       string
	first, last time.Time
}

// eventStage is the stage an event belongs to: its own Stage, else the
// stage its type ends or reports on.
func eventStage(ev events.Event) string {
	if ev.Data.Stage != "" {
		return ev.Data.Stage
	}
	switch ev.Type {
	case events.TypeRequested, events.TypePatched, events.TypePreHookDone:
		return agentsv1alpha1.UpgradingReasonPreUpgrade
	case events.TypePodReady:
		return agentsv1alpha1.UpgradingReasonUpgradePod
	case events.TypePostHookDone:
		return agentsv1alpha1.UpgradingReasonPostUpgrade
	}
	return ""
}

// printTitle prints the title once.
func (h *historyPrinter) printTitle() {
	fmt.Fprint(h.out, h.title)
	h.title = ""
}

func (h *historyPrinter) add(ev events.Event) {
	h.count++
	h.printTitle()
	if h.json {
		line, _ := json.Marshal(struct {
			Type string      `json:"type"`
			Time time.Time   `json:"time"`
			Data events.Data `json:"data"`
		}{ev.Type, ev.Time, ev.Data})
		fmt.Fprintln(h.out, string(line))
		return
	}
	// An ops's attempt id is its UID, the same for a sandbox deleted and
	// created again under the name while it ran: the new sandbox's events
	// are another attempt's, not late events of the deleted one's.
	if ev.Data.Attempt != h.attempt || (h.sandbox != "" && ev.Data.Sandbox.UID != h.sandbox) {
		h.flush(true)
		h.attempt, h.spans, h.ended, h.printed, h.header, h.prev = ev.Data.Attempt, nil, "", false, false, time.Time{}
		h.start, h.resumed, h.started = ev.Time, ev.Data.ResumedReason != "", false
		ops := "a direct upgrade (no ops)"
		if ev.Data.Ops.Name != "" {
			ops = "ops " + ev.Data.Ops.Name
		}
		fmt.Fprintf(h.out, "\nAttempt %s (%s)", ev.Data.Attempt, ops)
		if ev.Data.ResumedAttempt != "" {
			fmt.Fprintf(h.out, ", resuming attempt %s after %s", ev.Data.ResumedAttempt, ev.Data.ResumedReason)
		}
		switch uid := ev.Data.Sandbox.UID; {
		case h.current != "" && uid != h.current:
			fmt.Fprintf(h.out, ", of an earlier sandbox of this name (uid %s), deleted since", uid)
		case h.current == "" && h.sandbox != "" && uid != h.sandbox:
			fmt.Fprintf(h.out, ", of another sandbox of this name than the attempt above (uid %s)", uid)
		}
		h.sandbox = ev.Data.Sandbox.UID
		fmt.Fprintln(h.out)
	}
	if h.tw == nil {
		h.tw = tabwriter.NewWriter(h.out, 0, 4, 2, ' ', 0)
	}
	if !h.header {
		fmt.Fprintln(h.tw, "  TIME\t+SINCE\tEVENT\tSTAGE\tDETAIL")
		h.header = true
	}
	since := "-"
	var late []string
	switch {
	case h.prev.IsZero():
	case ev.Time.Before(h.prev):
		// Sent before the event above, stored after it: its publisher
		// kept it while NATS could not take it; its +SINCE stays "-".
		late = append(late, "sent at "+ev.Time.In(h.loc).Format("15:04:05.000")+", before the event above, and stored after it (NATS did not take it at once)")
	default:
		since = ev.Time.Sub(h.prev).Round(time.Millisecond).String()
		h.prev = ev.Time
	}
	if h.prev.IsZero() {
		h.prev = ev.Time
	}
	ended := h.ended != ""
	if ended {
		late = append(late, "after the attempt ended ("+h.ended+"): changes nothing")
	}
	tok, _ := events.TokenFor(ev.Type)
	stage, note := eventStage(ev), detail(ev)
	if len(late) > 0 {
		note = strings.Join(append([]string{note}, late...), "; ")
		note = strings.TrimPrefix(note, "; ")
		stage = "" // counted in no stage
	}
	if h.resumed && !h.started {
		// A resumed attempt's hand-over runs no stage: the request, and a
		// pod-ready that skips UpgradePod (the pod already runs the target),
		// are not counted in the stage before the one it resumes at.
		switch ev.Type {
		case events.TypeRequested:
			stage = ""
		case events.TypePodReady:
			stage, note = "", strings.TrimPrefix(note+", ", ", ")+"UpgradePod skipped: the pod already runs the target revision and is kept"
		}
	}
	if ev.Type == events.TypeStageStarted {
		h.started = true
	}
	shown := stage
	if shown == "" {
		shown = "-"
	}
	fmt.Fprintf(h.tw, "  %s\t%s\t%s\t%s\t%s\n", ev.Time.In(h.loc).Format("15:04:05.000"), since, tok, shown, note)
	if stage != "" {
		if n := len(h.spans); n > 0 && h.spans[n-1].stage == stage {
			h.spans[n-1].last = ev.Time
		} else {
			h.spans = append(h.spans, stageSpan{stage: stage, first: ev.Time, last: ev.Time})
		}
	}
	if ended {
		return
	}
	switch ev.Type {
	case events.TypePostHookDone:
		h.ended = agentsv1alpha1.UpgradingReasonSucceeded
	case events.TypeFailed:
		h.ended = ev.Data.Reason
	}
	if h.ended != "" {
		h.flush(true)
	}
}

// detail is the DETAIL column: a failure first, then pods, revision, hook
// exit code.
func detail(ev events.Event) string {
	d := ev.Data
	var parts []string
	if ev.Type == events.TypeFailed {
		if stderr, stdout, ok := agentruntime.HookOutput(d.Message); ok {
			out := d.Reason + ": "
			if cause := agentruntime.HookCause(d.Message); cause != "" {
				out += cause + "; " // timed out, not reachable: the output alone hides it
			}
			out += "hook stderr: " + tailLines(stderr, 5)
			if stdout != "" {
				out += "; stdout: " + tailLines(stdout, 5)
			}
			parts = append(parts, out)
		} else {
			parts = append(parts, d.Reason+": "+truncate(d.Message, 400))
		}
	}
	if ev.Type != events.TypeFailed && d.Message != "" {
		// A note on a stage that went on: a hook not run, and why.
		parts = append(parts, truncate(d.Message, 400))
	}
	if d.TargetRevision != "" && ev.Type == events.TypePatched {
		parts = append(parts, "target revision "+d.TargetRevision)
	}
	if d.TargetRevision != "" && ev.Type == events.TypeStageStarted && d.Stage == agentsv1alpha1.UpgradingReasonUpgradePod {
		// The template as it is when the pod is replaced: a direct
		// attempt's template edited again before then builds the edit.
		parts = append(parts, "builds revision "+d.TargetRevision)
	}
	if d.OldPodUID != "" && (ev.Type == events.TypePatched || ev.Type == events.TypePreHookDone) {
		parts = append(parts, "old pod "+string(d.OldPodUID))
	}
	if d.NewPodUID != "" && (ev.Type == events.TypePodReady || ev.Type == events.TypePostHookDone) {
		parts = append(parts, "new pod "+string(d.NewPodUID))
	}
	if d.HookStartedAt != nil && ev.Type == events.TypeStageStarted {
		// Published again by a hookrunner that took the input again (after a
		// restart of its own, of the pod's runtime or of the API server, or a
		// re-drive): a walk saw a hook run twice and one row of it.
		parts = append(parts, "hook delivered again: its run begun at "+d.HookStartedAt.UTC().Format(time.RFC3339)+" is followed if the sandbox's agent-runtime still has it, else the hook runs again")
	}
	if d.HookExitCode != nil {
		parts = append(parts, fmt.Sprintf("hook exit code %d", *d.HookExitCode))
	}
	if d.Redrive > 0 {
		parts = append(parts, fmt.Sprintf("re-driven by the watchdog (%d)", d.Redrive))
	}
	return strings.Join(parts, ", ")
}

// flush prints the rows so far and, when the attempt has ended (or
// inProgressToo), its stage durations, once.
func (h *historyPrinter) flush(inProgressToo bool) {
	if h.tw != nil {
		_ = h.tw.Flush()
		h.tw = nil
	}
	if h.attempt == "" || h.printed || len(h.spans) == 0 || (h.ended == "" && !inProgressToo) {
		return
	}
	var parts []string
	for i, s := range h.spans {
		end := s.last
		if i+1 < len(h.spans) {
			end = h.spans[i+1].first
			if s.stage == agentsv1alpha1.UpgradingReasonPreUpgrade && h.spans[i+1].stage == agentsv1alpha1.UpgradingReasonResumeSucceed {
				// The request of a paused sandbox's attempt: its time is the
				// wake-up's (the status showed Resuming), before the backup.
				s.stage = agentsv1alpha1.UpgradingReasonResuming
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s", s.stage, end.Sub(s.first).Round(time.Millisecond)))
	}
	total := h.spans[len(h.spans)-1].last.Sub(h.start).Round(time.Millisecond)
	state := "in progress"
	if h.ended != "" {
		state = h.ended
	}
	h.printed = true
	fmt.Fprintf(h.out, "  stages: %s; %s after %s\n", strings.Join(parts, ", "), state, total)
}
