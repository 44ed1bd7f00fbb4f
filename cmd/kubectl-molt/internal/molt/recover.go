package molt

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/upgrade"
)

// AnnotationRetryOf is set by kubectl molt retry on the ops it creates: the
// name of the Failed ops it retries. Read by people.
const AnnotationRetryOf = "molt.dev/retry-of"

type retryOptions struct {
	name    string
	timeout time.Duration
	watch   bool
}

func newRetryCommand(a *app) *cobra.Command {
	o := retryOptions{}
	cmd := &cobra.Command{
		Use:   "retry OPS",
		Short: "Retry a Failed ops: a new ops over its failed and not-started sandboxes",
		Long: `Retry a Failed SandboxUpdateOps the way the user guides say: a new ops with the same
selector, patch, hooks and strategy replaces it (created first, then the failed one is
deleted). Sandboxes already upgraded are
left alone (their template equals the patched one); each failed sandbox continues from
its failed stage (a new ops resumes it); the ones never started are upgraded.

When every failed sandbox failed in PostUpgrade and none was left unstarted, the new
ops carries only the postUpgrade hook (no patch, no preUpgrade), as the guides' restore
flow does: the new pods are kept and preUpgrade is not run again. If that ops would also
resume other sandboxes of the namespace (another ops's failures that match the selector),
it keeps the patch and both hooks instead, so their backup is taken.

Nothing is changed, and retry says why, when the ops failed because its patch cannot
work (create a new ops with a fixed patch), when another ops of the namespace has not
finished, when a retry of the ops exists already, or while one of its sandboxes is still
ending its attempt. The new ops is created before the
failed one is deleted, so an interruption loses nothing: a failed ops left behind is
final and holds neither its namespace nor its sandboxes.

The new ops is named OPS-retry (OPS-retry-2, ... if taken) unless --name says.`,
		Example: `  kubectl molt retry upgrade-my-sandboxes
  kubectl molt retry upgrade-my-sandboxes -w     # and watch the new ops until it ends`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.retry(cmd.Context(), args[0], o)
		},
	}
	cmd.Flags().StringVar(&o.name, "name", "", "name of the new ops (default OPS-retry)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long to wait for the failed ops to be deleted")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "then watch the new ops as status -w does (and exit as it does)")
	return cmd
}

// retrySpec is the spec of the ops that retries ops, given the reasons its
// failed sandboxes failed with and how many it never started; postOnly is
// true when it carries only the postUpgrade hook.
func retrySpec(ops *agentsv1alpha1.SandboxUpdateOps, failedReasons []string, notStarted int) (spec agentsv1alpha1.SandboxUpdateOpsSpec, postOnly bool) {
	spec = *ops.Spec.DeepCopy()
	spec.Paused = false
	postOnly = len(failedReasons) > 0 && notStarted == 0 && ops.Spec.Lifecycle != nil && ops.Spec.Lifecycle.PostUpgrade != nil
	for _, r := range failedReasons {
		if r != agentsv1alpha1.UpgradingReasonPostUpgradeFailed {
			postOnly = false
		}
	}
	if postOnly {
		spec.Patch.Raw = nil
		spec.Patch.Object = nil
		spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PostUpgrade: ops.Spec.Lifecycle.PostUpgrade.DeepCopy()}
	}
	return spec, postOnly
}

func (a *app) retry(ctx context.Context, name string, o retryOptions) error {
	agents, ns, ops, err := a.loadOps(ctx, name)
	var missing *exitError
	if errors.As(err, &missing) && missing.notFound {
		// Deleted (kubectl molt abort, kubectl delete): the sandboxes it left
		// failed keep their failure, and a new ops resumes them.
		missing.msg += fmt.Sprintf("; if it was deleted (`kubectl molt abort` deletes it), the sandboxes it left failed are resumed by a new SandboxUpdateOps that selects them, from the step each failed in (`kubectl get sbx -n %s -l %s=true` lists them)", ns, agentsv1alpha1.LabelUpgradeFailed)
	}
	if err != nil {
		return err
	}
	if ops.DeletionTimestamp != nil {
		return &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s is being deleted (it goes once its sandboxes in a stage end their attempt; `kubectl molt status %s -n %s -w` shows them): there is nothing left to retry from; once it is gone, apply a new SandboxUpdateOps that selects its sandboxes: each failed one resumes at the stage it failed in",
			ns, name, name, ns)}
	}
	if ops.Status.Phase == agentsv1alpha1.SandboxUpdateOpsCompleted {
		return &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s is Completed: every sandbox it selected was updated, so there is nothing to retry; to change them again, create a new SandboxUpdateOps (`kubectl molt plan -f FILE` shows what it would do)", ns, name)}
	}
	if ops.Status.Phase != agentsv1alpha1.SandboxUpdateOpsFailed {
		return &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s is %s, not Failed: retry is for a Failed ops; watch it with `kubectl molt status %s -n %s -w`, or stop it with `kubectl molt abort %s -n %s`",
			ns, name, phaseOf(ops), name, ns, name, ns)}
	}
	if problem := upgrade.PatchProblem(ops); problem != "" {
		return &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s failed because its patch cannot work (%s); a retry would fail the same way, and spec.patch cannot be changed: create a new SandboxUpdateOps with a fixed patch (`kubectl molt plan` checks one first)", ns, name, problem)}
	}
	if blocking, err := retryBlockedBy(ctx, agents, ops); err != nil {
		return err
	} else if blocking != "" {
		return &exitError{code: ExitError, msg: blocking}
	}
	claimed, err := claimedSandboxes(ctx, agents, ops)
	if err != nil {
		return err
	}
	// Failed is decided from statusagg's cache: a sandbox admitted in the
	// same instant may still be in a stage. The retry would leave it out,
	// and nothing would resume it if it then failed.
	if tail := stillInFlight(ops, claimed); len(tail) > 0 {
		return &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s is Failed, but %d of its sandboxes %s still ending %s attempt (%s): nothing was changed; wait until %s (`kubectl molt status %s -n %s -w`; each stage has a deadline), then retry",
			ns, name, len(tail), upgrade.Agree(len(tail), "is", "are"), upgrade.Agree(len(tail), "its", "their"), strings.Join(tail, ", "), upgrade.Agree(len(tail), "it ends", "they end"), name, ns)}
	}
	reasons := map[string][]string{}
	var failedReasons, failures []string
	failedWith := map[string]string{}
	for i := range claimed {
		sb := &claimed[i]
		if upgrade.StateFor(sb, ops.Name, ops.UID) != upgrade.Failed {
			continue
		}
		r, _ := upgrade.ReasonFor(sb, string(ops.UID))
		reasons[r] = append(reasons[r], sb.Name)
		failedReasons = append(failedReasons, r)
		if c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading); c != nil {
			failures = append(failures, c.Message)
			failedWith[sb.Name] = c.Message
		}
	}
	if only := upgrade.OnlyRecreateResumes(ops.Spec.UpdateStrategy.EffectiveType(), failedWith); len(only) > 0 {
		// A retry keeps CheckpointRestore, and would fail them the same way
		// (a walk saw the retry fail within a second).
		return &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s cannot be retried, nothing was changed: a retry keeps updateStrategy.type CheckpointRestore, which cannot resume %s (%s; each one's message says why: no running pod to checkpoint and no checkpoint kept, a paused sandbox, or an image change). "+
			"Resume %s with a new SandboxUpdateOps of updateStrategy.type Recreate that selects %s (%s: \"true\" selects the failed sandboxes), with the preUpgrade and postUpgrade that keep the workspace; without them, what the pod holds outside volumes is lost",
			ns, name, upgrade.Sandboxes(len(only)), strings.Join(only, ", "), upgrade.Agree(len(only), "it", "them"), upgrade.Agree(len(only), "it", "them"), agentsv1alpha1.LabelUpgradeFailed)}
	}
	// What the retry would start is read from the sandboxes as they are now,
	// not from the failed ops's last status: another ops may have upgraded
	// them since.
	list, err := agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the sandboxes of namespace %s to see what a retry of %s would start (nothing was changed): %w", ns, name, err)
	}
	opsList, err := agents.AgentsV1alpha1().SandboxUpdateOps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the SandboxUpdateOps of namespace %s (nothing was changed): %w", ns, err)
	}
	targets := retryTargets(ops, list.Items, opsList.Items)
	if len(targets.since) > 0 {
		return &exitError{code: ExitError, msg: fmt.Sprintf("a retry of SandboxUpdateOps %s/%s would start again, with its patch, %s that another upgrade went through since %s began (%s): %s's patch would be applied to %s again and %s pod replaced; nothing was changed. "+
			"To finish only the others, create a new SandboxUpdateOps whose selector leaves those out; if %s's patch should go to them too, apply it as a new SandboxUpdateOps (`kubectl molt plan -f FILE` shows what it would do)",
			ns, name, upgrade.Sandboxes(len(targets.since)), name, strings.Join(targets.since, ", "), name, upgrade.Agree(len(targets.since), "it", "them"), upgrade.Agree(len(targets.since), "its", "their"), name)}
	}
	if bare, added := upgrade.ImagelessAdds(ops.Spec.Patch.Raw, targets.starts); len(bare) > 0 {
		return &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s cannot be retried, nothing was changed: %s",
			ns, name, upgrade.ImagelessRetryHint(strings.Join(bare, ", "), ns, added, len(bare) < len(targets.starts)))}
	}
	if len(failedReasons) == 0 && targets.notStarted == 0 {
		return &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s has no failed or not-started sandbox left to retry (none is left failed by it, and the sandboxes it selects need nothing, or another ops took them): nothing was changed; read `kubectl describe suo %s -n %s` for why it Failed", ns, name, name, ns)}
	}
	spec, postOnly := retrySpec(ops, failedReasons, targets.notStarted)
	newName := o.name
	if newName == "" {
		if newName, err = freeRetryName(ctx, agents, ns, name); err != nil {
			return err
		}
	}
	next := retryOps(ops, newName, spec)
	if postOnly {
		if others := alsoResumed(next, list.Items, reasons[agentsv1alpha1.UpgradingReasonPostUpgradeFailed]); len(others) > 0 {
			// Without preUpgrade, a sandbox that failed before its backup
			// would have its pod replaced with no backup taken.
			next.Spec = *ops.Spec.DeepCopy()
			next.Spec.Paused = false
			postOnly = false
			fmt.Fprintf(a.out, "note: a postUpgrade-only retry would also resume %s, which did not fail in PostUpgrade under %s; retrying with the same patch and hooks instead, so their backup is taken\n",
				strings.Join(others, ", "), name)
		}
	}
	// The retry is created before the failed ops is deleted, so an
	// interruption at any point leaves the spec in the cluster. The failed
	// ops is finished: it holds neither its namespace nor its sandboxes (the
	// retry claims them; its release of the rest carries each sandbox's
	// resourceVersion, so it never strips the retry's claim).
	if _, err := agents.AgentsV1alpha1().SandboxUpdateOps(ns).Create(ctx, next, metav1.CreateOptions{}); err != nil {
		if blocking, berr := retryBlockedBy(ctx, agents, ops); berr == nil && blocking != "" {
			// Another run of retry, or an ops applied meanwhile, came first.
			return &exitError{code: ExitError, msg: blocking}
		}
		var status apierrors.APIStatus
		if !errors.As(err, &status) {
			// No answer (a timeout, Ctrl-C): the create may have happened.
			return &exitError{code: ExitError, msg: fmt.Sprintf("create the retry ops %s/%s: %v; it may exist or not (kubectl get suo %s -n %s), the failed ops %s is still there: run retry again, which says so if the retry exists",
				ns, newName, err, newName, ns, name)}
		}
		return &exitError{code: ExitError, msg: fmt.Sprintf("create the retry ops %s/%s: %v; nothing was changed, the failed ops %s is still there: fix the cause (or name the retry with --name) and run retry again",
			ns, newName, err, name)}
	}
	var parts []string
	keys := make([]string, 0, len(reasons))
	for r := range reasons {
		keys = append(keys, r)
	}
	sort.Strings(keys)
	for _, r := range keys {
		parts = append(parts, fmt.Sprintf("%d %s (%s)", len(reasons[r]), r, strings.Join(reasons[r], ", ")))
	}
	how := "with the same patch and hooks"
	if postOnly {
		how = "with only the postUpgrade hook: the new pods are kept and preUpgrade is not run again"
	}
	if targets.notStarted > 0 {
		parts = append(parts, fmt.Sprintf("%d not started", targets.notStarted))
	}
	fmt.Fprintf(a.out, "created SandboxUpdateOps %s/%s %s: retries %s\n", ns, newName, how, strings.Join(parts, "; and "))
	if hint := upgrade.ImageNotPulledHint(next.Spec.Patch.Raw, failures); hint != "" {
		// The registry may have been the cause, so the retry is made; but
		// a wrong image fails it the same way (a walk's did).
		fmt.Fprintf(a.out, "warning: %s (to stop this retry: kubectl molt abort %s -n %s)\n", hint, newName, ns)
	}
	if err := deleteAndWait(ctx, agents, ops, o.timeout); err != nil {
		// The retry runs all the same: the failed ops left behind is final
		// and holds nothing.
		runs := fmt.Sprintf("the retry SandboxUpdateOps %s/%s is created and runs all the same (kubectl molt status %s -n %s -w)", ns, newName, newName, ns)
		var waited *exitError
		var status apierrors.APIStatus
		switch {
		case errors.As(err, &waited): // deleted; the wait for it to go ended
			return &exitError{code: ExitError, msg: fmt.Sprintf("%s\n%s", waited.msg, runs)}
		case errors.As(err, &status): // refused: not deleted
			return &exitError{code: ExitError, msg: fmt.Sprintf("%v\n%s; the failed ops %s was not deleted: it is final and holds nothing, delete it when you can: kubectl delete suo %s -n %s",
				err, runs, name, name, ns)}
		default: // no answer: it may be deleted or not
			return &exitError{code: ExitError, msg: fmt.Sprintf("%v\n%s; the failed ops %s may be deleted or not: it is final and holds nothing, delete it if it is still there (kubectl get suo %s -n %s)",
				err, runs, name, name, ns)}
		}
	}
	fmt.Fprintf(a.out, "deleted SandboxUpdateOps %s/%s\n", ns, name)
	fmt.Fprintf(a.out, "watch it: kubectl molt status %s -n %s -w\n", newName, ns)
	if o.watch {
		return a.status(ctx, newName, statusOptions{watch: true, interval: time.Second, slowest: 5, color: "auto"})
	}
	return nil
}

// retryOps is the ops named newName, with spec, that retries ops: its
// labels, and annotations saying what it retries and, when the user resumed
// ops over an added container that looked misspelt, that the container is
// meant (the retry is not paused for it again).
func retryOps(ops *agentsv1alpha1.SandboxUpdateOps, newName string, spec agentsv1alpha1.SandboxUpdateOpsSpec) *agentsv1alpha1.SandboxUpdateOps {
	next := &agentsv1alpha1.SandboxUpdateOps{
		TypeMeta:   metav1.TypeMeta{APIVersion: agentsv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxUpdateOps"},
		ObjectMeta: metav1.ObjectMeta{Name: newName, Namespace: ops.Namespace, Labels: ops.Labels, Annotations: map[string]string{AnnotationRetryOf: ops.Name}},
		Spec:       spec,
	}
	if v, ok := ops.Annotations[upgrade.AnnotationMisspeltContainer]; ok {
		next.Annotations[upgrade.AnnotationMisspeltContainer] = v
	}
	return next
}

// retryPlan is what a retry of a failed ops would do, from the sandboxes as
// they are: how many it would start that the failed ops left not started, and
// the sandboxes it would start or resume although another upgrade went
// through them since the failed ops began (since, in name order).
type retryPlan struct {
	notStarted int
	since      []string
	// starts are the sandboxes the retry would start or resume.
	starts []*agentsv1alpha1.Sandbox
}

// retryTargets selects, as the selector would for a retry of ops with its
// spec, the sandboxes the retry would start or resume, among all; allOps
// names the attempts of other ops. A sandbox whose status shows an attempt
// other than ops's that moved after ops was created was upgraded (or tried)
// by someone else since: a retry would put ops's patch over that.
func retryTargets(ops *agentsv1alpha1.SandboxUpdateOps, all []agentsv1alpha1.Sandbox, allOps []agentsv1alpha1.SandboxUpdateOps) retryPlan {
	probe := retryOps(ops, ops.Name, *ops.Spec.DeepCopy())
	probe.UID = ops.UID
	sandboxes := make([]*agentsv1alpha1.Sandbox, len(all))
	for i := range all {
		sandboxes[i] = &all[i]
	}
	var plan retryPlan
	sel, err := upgrade.Select(probe, sandboxes, nil)
	if err != nil {
		return plan // the selector is the failed ops's, which selected before
	}
	names := map[string]string{}
	for _, o := range allOps {
		names[string(o.UID)] = o.Name
	}
	for _, c := range sel.Candidates {
		if c.State != upgrade.NotStarted && c.State != upgrade.Failed {
			continue
		}
		sb := c.Sandbox
		attempt := upgrade.CurrentAttempt(sb)
		if cond := meta.FindStatusCondition(sb.Status.Conditions, upgrade.ConditionAttempt); attempt != "" && attempt != string(ops.UID) && cond != nil && movedSince(cond.LastTransitionTime, ops.CreationTimestamp) {
			by := "an ops since deleted"
			switch {
			case names[attempt] != "":
				by = "ops " + names[attempt]
			case strings.HasPrefix(attempt, upgrade.DirectAttemptPrefix):
				by = "a direct upgrade"
			}
			reason, _ := upgrade.ReasonFor(sb, attempt)
			plan.since = append(plan.since, fmt.Sprintf("%s: %s by %s", sb.Name, reason, by))
			continue
		}
		if c.State == upgrade.NotStarted {
			plan.notStarted++
		}
		plan.starts = append(plan.starts, sb)
	}
	return plan
}

// movedSince reports whether a condition that last moved at moved moved
// after an ops created at created began. Both are whole seconds in the API,
// and an ops that fails fast is followed by its fix within the second it was
// created: the same second counts as since. A retry refused for a sandbox
// another ops upgraded just before changes nothing; one let through would
// put a broken patch over a sandbox that was fixed.
func movedSince(moved, created metav1.Time) bool {
	return !moved.Before(&created)
}

// stillInFlight names the sandboxes ops claimed that have not ended their
// attempt: in a stage, or patched and not recorded yet.
func stillInFlight(ops *agentsv1alpha1.SandboxUpdateOps, claimed []agentsv1alpha1.Sandbox) []string {
	var names []string
	for i := range claimed {
		if upgrade.DeletionWaitsFor(ops, &claimed[i]) {
			names = append(names, claimed[i].Name)
		}
	}
	return names
}

// retryBlockedBy says why ops may not be retried now, "" when it may: another
// ops of its namespace is not finished (the retry would wait behind it, or
// race it), or a retry of it exists already.
func retryBlockedBy(ctx context.Context, agents versioned.Interface, ops *agentsv1alpha1.SandboxUpdateOps) (string, error) {
	list, err := agents.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list the SandboxUpdateOps of namespace %s (nothing was changed): %w", ops.Namespace, err)
	}
	for i := range list.Items {
		o := &list.Items[i]
		switch {
		case o.UID == ops.UID:
		case o.Annotations[AnnotationRetryOf] == ops.Name && !o.CreationTimestamp.Before(&ops.CreationTimestamp):
			// (An older retry of an earlier ops of the same name does not count.)
			return fmt.Sprintf("SandboxUpdateOps %s/%s already retries %s (phase %s): nothing was changed; watch it with `kubectl molt status %s -n %s -w`", o.Namespace, o.Name, ops.Name, phaseOf(o), o.Name, o.Namespace), nil
		case !upgrade.IsFinished(o):
			return fmt.Sprintf("SandboxUpdateOps %s/%s is %s in namespace %s, and only one ops runs there at a time: nothing was changed; retry %s once it has finished, or stop it with `kubectl molt abort %s -n %s`", o.Namespace, o.Name, phaseOf(o), o.Namespace, ops.Name, o.Name, o.Namespace), nil
		}
	}
	return "", nil
}

// alsoResumed names the sandboxes the retry ops next would start or resume
// besides own (the failed ops's PostUpgradeFailed sandboxes), as the
// selector would select them: another ops's failed sandboxes that match the
// same selector, or sandboxes not started.
func alsoResumed(next *agentsv1alpha1.SandboxUpdateOps, all []agentsv1alpha1.Sandbox, own []string) []string {
	sandboxes := make([]*agentsv1alpha1.Sandbox, len(all))
	for i := range all {
		sandboxes[i] = &all[i]
	}
	sel, err := upgrade.Select(next, sandboxes, nil)
	if err != nil {
		return nil // the selector is the failed ops's, which selected before
	}
	var others []string
	for _, c := range sel.Candidates {
		if (c.State == upgrade.NotStarted || c.State == upgrade.Failed) && !slices.Contains(own, c.Sandbox.Name) {
			others = append(others, c.Sandbox.Name)
		}
	}
	return others
}

// maxOpsName is the longest name the CRD accepts: an ops name is a label
// value on the sandboxes it claims.
const maxOpsName = content.LabelValueMaxLength

// fitName is name+suffix, with name shortened so that the whole fits in
// maxOpsName.
func fitName(name, suffix string) string {
	if over := len(name) + len(suffix) - maxOpsName; over > 0 {
		name = strings.TrimRight(name[:len(name)-over], "-.")
	}
	return name + suffix
}

// freeRetryName lists the ops of ns for retryName.
func freeRetryName(ctx context.Context, agents versioned.Interface, ns, name string) (string, error) {
	list, err := agents.AgentsV1alpha1().SandboxUpdateOps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list the SandboxUpdateOps of namespace %s: %w", ns, err)
	}
	var taken []string
	for _, o := range list.Items {
		taken = append(taken, o.Name)
	}
	return retryName(name, taken), nil
}

// retryOf matches the name a retry is given: its ops's name, then -retry
// and, from the second retry on, its number.
var retryOf = regexp.MustCompile(`^(.+)-retry(?:-([0-9]+))?$`)

// retryName is the first name no ops in taken has among name-retry,
// name-retry-2, -3, …, shortened where longer than maxOpsName. A retry of
// a retry counts on (up-retry's is up-retry-2), not up-retry-retry.
func retryName(name string, taken []string) string {
	base, from := name, 1
	if m := retryOf.FindStringSubmatch(name); m != nil {
		base, from = m[1], 2
		if n, err := strconv.Atoi(m[2]); err == nil && n >= 2 {
			from = n + 1
		}
	}
	for i := from; ; i++ {
		suffix := "-retry"
		if i > 1 {
			suffix = fmt.Sprintf("-retry-%d", i)
		}
		if free := fitName(base, suffix); !slices.Contains(taken, free) {
			return free
		}
	}
}
