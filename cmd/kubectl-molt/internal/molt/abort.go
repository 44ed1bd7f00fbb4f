package molt

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

type abortOptions struct {
	timeout time.Duration
}

func newAbortCommand(a *app) *cobra.Command {
	o := abortOptions{}
	cmd := &cobra.Command{
		Use:   "abort OPS",
		Short: "Stop an ops: pause it, wait for the sandboxes in flight to end their attempt, delete it",
		Long: `Abort a SandboxUpdateOps safely: set spec.paused so no new sandbox is admitted, wait
until every sandbox it is upgrading has ended its attempt (Succeeded or a failed
reason; each stage has a deadline), then delete the ops (its label is removed from the
sandboxes). Sandboxes never started keep their old template; a failed one can be
resumed by a new ops.`,
		Example: `  kubectl molt abort upgrade-my-sandboxes`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.abort(cmd.Context(), args[0], o)
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 15*time.Minute, "how long to wait for the sandboxes in flight")
	return cmd
}

func (a *app) abort(ctx context.Context, name string, o abortOptions) error {
	agents, ns, ops, err := a.loadOps(ctx, name)
	if err != nil {
		return err
	}
	if !upgrade.IsFinished(ops) && !ops.Spec.Paused {
		// Only the ops read: one deleted and applied again under the same
		// name meanwhile fails the test and is left running.
		pause := fmt.Sprintf(`[{"op":"test","path":"/metadata/uid","value":%q},{"op":"add","path":"/spec/paused","value":true}]`, ops.UID)
		if _, err := agents.AgentsV1alpha1().SandboxUpdateOps(ns).Patch(ctx, name, types.JSONPatchType, []byte(pause), metav1.PatchOptions{}); err != nil {
			if now, gerr := agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, name, metav1.GetOptions{}); gerr == nil && now.UID != ops.UID {
				return fmt.Errorf("SandboxUpdateOps %s/%s was deleted and created again while abort read it (uid %s, now %s); nothing was paused: run abort again to abort the new one", ns, name, ops.UID, now.UID)
			}
			return fmt.Errorf("pause SandboxUpdateOps %s/%s: %w", ns, name, err)
		}
		fmt.Fprintf(a.out, "paused SandboxUpdateOps %s/%s: no new sandbox is admitted\n", ns, name)
	}
	last := ""
	var s Summary
	gone := false
	what := fmt.Sprintf("waiting for the sandboxes in flight of SandboxUpdateOps %s/%s: it stays paused; run abort again to finish, or resume it with `kubectl patch suo %s -n %s --type merge -p '{\"spec\":{\"paused\":false}}'`", ns, name, name, ns)
	err = poll(ctx, o.timeout, what, func() (bool, error) {
		cur, err := agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != ops.UID) {
			gone = true // deleted meanwhile (another abort, a retry, kubectl delete): nothing left to wait for
			return true, nil
		}
		if apierrors.IsForbidden(err) {
			return false, stopPolling{fmt.Sprintf("cannot read SandboxUpdateOps %s/%s: %v; abort needs get on sandboxupdateops and list on sandboxes in namespace %s", ns, name, err, ns)}
		}
		if err != nil {
			return false, err
		}
		claimed, err := claimedSandboxes(ctx, agents, cur)
		if apierrors.IsForbidden(err) {
			return false, stopPolling{fmt.Sprintf("%v; abort needs list on sandboxes in namespace %s", err, ns)}
		}
		if err != nil {
			return false, err
		}
		s = summarize(cur, claimed, time.Now(), len(claimed))
		var inFlight []string
		for _, f := range s.InFlight {
			inFlight = append(inFlight, f.Name+" ("+f.Stage+")")
		}
		if len(inFlight) == 0 {
			return true, nil
		}
		if line := strings.Join(inFlight, ", "); line != last {
			fmt.Fprintf(a.out, "waiting for %s in flight to end %s attempt: %s\n", upgrade.Sandboxes(len(inFlight)), upgrade.Agree(len(inFlight), "its", "their"), line)
			last = line
		}
		return false, nil
	}, func() string {
		return fmt.Sprintf("SandboxUpdateOps %s/%s is paused but sandboxes are still upgrading after %s: %s; each stage has a deadline, see `kubectl molt status %s -n %s`, and run abort again to keep waiting",
			ns, name, o.timeout, last, name, ns)
	})
	if err != nil {
		return err
	}
	if gone {
		fmt.Fprintf(a.out, "SandboxUpdateOps %s/%s was deleted meanwhile by someone else: nothing left to abort; its sandboxes were released (`kubectl get sbx -n %s -o wide` shows where each one is)\n", ns, name, ns)
		return nil
	}
	if err := deleteAndWait(ctx, agents, ops, 2*time.Minute); err != nil {
		return err
	}
	if ops.Status.Phase == agentsv1alpha1.SandboxUpdateOpsCompleted {
		// Its status holds its final counts (the sandboxes it updated may have
		// left since).
		fmt.Fprintf(a.out, "deleted SandboxUpdateOps %s/%s, which had already Completed: %d of %d sandboxes updated; nothing was in flight\n",
			ns, name, ops.Status.UpdatedReplicas, ops.Status.Replicas)
		return nil
	}
	if ops.Status.Phase == agentsv1alpha1.SandboxUpdateOpsFailed {
		// Its status holds the counts it ended with: since then, a later ops
		// may have taken its sandboxes on, so they are no longer its own to
		// count (they are not "never started").
		fmt.Fprintf(a.out, "deleted SandboxUpdateOps %s/%s, which had already ended Failed: when it ended, %d updated, %d failed, %d never started; %s\n",
			ns, name, ops.Status.UpdatedReplicas, ops.Status.FailedReplicas,
			max(0, ops.Status.Replicas-ops.Status.UpdatedReplicas-ops.Status.FailedReplicas-ops.Status.UpdatingReplicas), failedSince(ns, int(ops.Status.FailedReplicas), s.liveFailed))
		return nil
	}
	updated, failed, notStarted := finalCounts(s)
	fmt.Fprintf(a.out, "deleted SandboxUpdateOps %s/%s: %d updated, %d failed%s, %d never started (they keep their old template)\n",
		ns, name, updated, failed, resumeHint(ns, failed), notStarted)
	return nil
}

// resumeHint is how the sandboxes an aborted ops left failed are resumed:
// a new ops that selects them (its retry needs the ops, which is gone).
func resumeHint(ns string, failed int) string {
	if failed == 0 {
		return ""
	}
	return fmt.Sprintf(" (a new SandboxUpdateOps that selects %s resumes %s from the failed step; `kubectl get sbx -n %s -l %s=true` lists them)",
		upgrade.Agree(failed, "it", "them"), upgrade.Agree(failed, "it", "them"), ns, agentsv1alpha1.LabelUpgradeFailed)
}

// failedSince says what became of the sandboxes a Failed ops left failed:
// still failed for it (a new ops resumes them) or taken on by a later ops.
func failedSince(ns string, failedAtEnd, stillFailed int) string {
	switch {
	case failedAtEnd == 0:
		return "nothing was in flight"
	case stillFailed == 0:
		return "none of its failed sandboxes is still failed for it: a later ops took them on, or they were deleted (`kubectl get sbx -n " + ns + " -o wide` shows where each one is)"
	}
	return fmt.Sprintf("%d still failed for it%s", stillFailed, resumeHint(ns, stillFailed))
}

// finalCounts are the counts of an ops with nothing in flight, from its
// claimed sandboxes as summarize last read them: the ops's status counters
// are written at most every --ops-status-interval, so the last attempts to
// end may not be in them yet. Updated never goes below the status's (it
// also counts updated sandboxes that have since left the ops).
func finalCounts(s Summary) (updated, failed, notStarted int) {
	updated = max(s.liveUpdated, s.Updated)
	return updated, s.liveFailed, max(0, s.Total-updated-s.liveFailed)
}
