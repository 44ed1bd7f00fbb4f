package molt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/upgrade"
)

type planOptions struct {
	file    string
	sandbox string
	all     bool
}

func newPlanCommand(a *app) *cobra.Command {
	o := planOptions{}
	cmd := &cobra.Command{
		Use:   "plan -f OPS.yaml",
		Short: "Preview an ops without changing anything: selected and excluded sandboxes, batches, the pod template diff",
		Long: `Dry-run a SandboxUpdateOps: the API server checks it (a server-side dry run, so what it
would refuse is refused here with its words), then plan shows which sandboxes the
selector would pick, in which order and batches of maxUnavailable, which sandboxes of
the namespace it leaves out and why (selector, state filter, pool member, another
active ops, nothing to change), and the unified diff between a sandbox's current pod
template and the patched one: the first selected sandbox, --sandbox NAME, or --all.
Selection and the patch are computed by the same code as molt's selector. Nothing is
created or changed.

Exit code: 0 when the ops would be accepted, 1 when it would be refused, 2 on an error.`,
		Example: `  kubectl molt plan -f ops.yaml
  kubectl molt plan -f ops.yaml --sandbox box-3
  kubectl molt plan -f ops.yaml --all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.plan(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVarP(&o.file, "filename", "f", "", "the SandboxUpdateOps manifest (- for stdin)")
	cmd.Flags().StringVar(&o.sandbox, "sandbox", "", "show the pod template diff of this sandbox (default: the first selected)")
	cmd.Flags().BoolVar(&o.all, "all", false, "show the pod template diff of every selected sandbox")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// manifestName names flag -f's manifest in messages.
func manifestName(file string) string {
	if file == "-" {
		return "the manifest on stdin"
	}
	return file
}

// readManifest reads an ops manifest as JSON.
func (a *app) readManifest(file string) ([]byte, error) {
	var (
		data []byte
		err  error
	)
	if file == "-" {
		data, err = io.ReadAll(a.in)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s (flag -f): %w", file, err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, &exitError{code: ExitError, msg: fmt.Sprintf("%s is not YAML or JSON: %v", file, err)}
	}
	return js, nil
}

// dryRunCreate sends the manifest as it is (unknown fields included) to
// the API server as a server-side dry-run create with strict field
// validation, as kubectl apply does, and returns the ops the server would
// store (defaults applied).
func dryRunCreate(ctx context.Context, agents versioned.Interface, ns string, manifest []byte) (*agentsv1alpha1.SandboxUpdateOps, error) {
	out := &agentsv1alpha1.SandboxUpdateOps{}
	err := agents.AgentsV1alpha1().RESTClient().Post().
		Namespace(ns).Resource("sandboxupdateops").
		Param("dryRun", metav1.DryRunAll).Param("fieldValidation", "Strict").
		Body(manifest).SetHeader("Content-Type", "application/json").
		Do(ctx).Into(out)
	return out, err
}

func (a *app) plan(ctx context.Context, o planOptions) error {
	manifest, err := a.readManifest(o.file)
	if err != nil {
		return err
	}
	var head struct {
		Kind     string            `json:"kind"`
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(manifest, &head); err != nil || head.Kind != "SandboxUpdateOps" {
		return &exitError{code: ExitError, msg: fmt.Sprintf("%s: want one SandboxUpdateOps (kind %q)", o.file, head.Kind)}
	}
	agents, kube, ns, err := a.clients()
	if err != nil {
		return err
	}
	if explicit := a.flags.Namespace; explicit != nil && *explicit != "" && head.Metadata.Namespace != "" && head.Metadata.Namespace != *explicit {
		return &exitError{code: ExitError, msg: fmt.Sprintf("the namespace from the provided object %q does not match the namespace %q (flag -n)", head.Metadata.Namespace, *explicit)}
	}
	if head.Metadata.Namespace != "" {
		ns = head.Metadata.Namespace
	}
	ops, err := dryRunCreate(ctx, agents, ns, manifest)
	refusedNow, noCreate := "", ""
	if upgrade.IsRBACDenial(err) {
		// RBAC: this account may read but not create ops (Kubernetes'
		// view role), and a dry run is a create. The file is read here,
		// strictly, so that whoever may only look can still plan.
		noCreate = err.Error()
		if ops, err = decodeOps(manifest, ns); err != nil {
			return &exitError{code: ExitFailed, msg: fmt.Sprintf("%s: %v\nfix %s and run plan again", manifestName(o.file), err, manifestName(o.file))}
		}
	}
	if (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), oneActiveOpsPolicy) {
		// The policy refuses every create while another ops of the
		// namespace is active, dry runs too: nothing is wrong with the
		// file. It is read here instead, strictly, and the plan goes on.
		refusedNow = err.Error()
		ops, err = decodeOps(manifest, ns)
		if err != nil {
			return &exitError{code: ExitFailed, msg: fmt.Sprintf("%s: %v\nfix %s and run plan again", manifestName(o.file), err, manifestName(o.file))}
		}
		if ops.Name != "" {
			// The policy answers before the name is checked.
			if _, gerr := agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, ops.Name, metav1.GetOptions{}); gerr == nil {
				err = apierrors.NewAlreadyExists(agentsv1alpha1.Resource("sandboxupdateops"), ops.Name)
			}
		}
	}
	ended := ""
	if apierrors.IsAlreadyExists(err) && refusedNow == "" {
		// An ops of that name that has ended: what its messages send the
		// user here for (which sandboxes it leaves out, and why) is the
		// plan of the file as a new ops, made under another name.
		if existing, gerr := agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, head.Metadata.Name, metav1.GetOptions{}); gerr == nil && upgrade.IsFinished(existing) {
			if renamed, rerr := withGenerateName(manifest); rerr == nil {
				// Refused (a name too long with the suffix), the plan says the
				// ops exists, as before.
				if planned, perr := dryRunCreate(ctx, agents, ns, renamed); perr == nil {
					ops, err = planned, nil
					ended, ops.Name = string(existing.Status.Phase), head.Metadata.Name
				}
			}
		}
	}
	switch {
	case apierrors.IsAlreadyExists(err):
		return &exitError{code: ExitFailed, msg: fmt.Sprintf("%v: the ops exists already, and its selector, patch and lifecycle cannot change; watch it with `kubectl molt status %s -n %s`, or give the new one another name", err, head.Metadata.Name, ns)}
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err):
		return &exitError{code: ExitFailed, msg: fmt.Sprintf("the API server refuses this SandboxUpdateOps (nothing was changed): %v\nfix %s and run plan again", err, manifestName(o.file))}
	case err != nil:
		return fmt.Errorf("dry-run create of SandboxUpdateOps %s/%s: %w", ns, head.Metadata.Name, err)
	}

	sbList, err := agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the sandboxes of namespace %s: %w", ns, err)
	}
	opsList, err := agents.AgentsV1alpha1().SandboxUpdateOps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the SandboxUpdateOps of namespace %s: %w", ns, err)
	}
	sandboxes := make([]*agentsv1alpha1.Sandbox, len(sbList.Items))
	for i := range sbList.Items {
		sandboxes[i] = &sbList.Items[i]
	}
	all := make([]*agentsv1alpha1.SandboxUpdateOps, 0, len(opsList.Items))
	for i := range opsList.Items {
		all = append(all, &opsList.Items[i])
	}
	sel, err := upgrade.Select(ops, sandboxes, upgrade.OtherActive(all, ops.Name))
	if err != nil {
		return &exitError{code: ExitFailed, msg: fmt.Sprintf("SandboxUpdateOps %s/%s: %v; the selector would admit no sandbox: fix the manifest", ns, ops.Name, err)}
	}
	sel.PodOf = sandboxPods(ctx, kube, ns, sel)
	w := a.out
	fmt.Fprintf(w, "Plan for SandboxUpdateOps %s/%s (dry run: nothing was changed)\n", ns, ops.Name)
	if ended != "" {
		fmt.Fprintf(w, "  an ops of this name exists and has ended (%s): this is the plan of the file as a new ops (apply it under another name, or delete that one first); `kubectl molt status %s -n %s` shows the one that ran\n", ended, ops.Name, ns)
	}
	switch {
	case noCreate != "":
		fmt.Fprintf(w, "  you may not create SandboxUpdateOps in namespace %s (%s), and a server-side dry run is a create: its fields were read here, not checked by the server; applying it needs Kubernetes' edit role (or admin) in the namespace\n", ns, noCreate)
	case refusedNow == "":
		fmt.Fprintf(w, "  the API server accepts it (server-side dry run)\n")
	default:
		fmt.Fprintf(w, "  the API server refuses to create it while another ops of the namespace is active (%s), so its fields were read here, not checked by the server\n", oneActiveOpsPolicy)
	}
	strategy := ops.Spec.UpdateStrategy.Type
	if strategy == "" {
		strategy = agentsv1alpha1.UpgradeTypeRecreate
	}
	fmt.Fprintf(w, "  strategy %s, maxUnavailable %d, %s selected\n", strategy, sel.MaxUnavailable, upgrade.Sandboxes(sel.Total()))
	if active := upgrade.ActiveOps(append(all, ops)); active != nil && active.Name != ops.Name {
		fmt.Fprintf(w, "  it would wait in Pending until SandboxUpdateOps %s ends: one ops is active per namespace\n", active.Name)
		if active.Spec.Paused {
			fmt.Fprintf(w, "  SandboxUpdateOps %s is paused, so it ends only once resumed (spec.paused: false) or deleted; `kubectl describe suo %s -n %s` says why it is paused\n", active.Name, active.Name, active.Namespace)
		}
	}
	if nulls := patchNulls(ops.Spec.Patch.Raw); len(nulls) > 0 {
		fmt.Fprintf(w, "  warning: spec.patch removes %s with null: client-side `kubectl apply` drops null values, so the ops it stores would not remove them (this plan shows the removal); create it with `kubectl create -f %s` or `kubectl apply --server-side -f %s`, which keep them\n",
			strings.Join(nulls, ", "), manifestName(o.file), manifestName(o.file))
	}
	if problem, err := patchProblem(ctx, kube, ops, sel); upgrade.IsRBACDenial(err) {
		// The selector checks it when the ops is applied, with its own
		// rights; here only whoever may create pods can.
		fmt.Fprintf(w, "  the patched pod was not checked by the API server: you may not create pods in namespace %s, and its server-side dry run is a create; molt checks it when the ops is applied, before the first sandbox\n", ns)
	} else if err != nil {
		return err
	} else if problem != "" {
		return &exitError{code: ExitFailed, msg: fmt.Sprintf("SandboxUpdateOps %s/%s would fail with InvalidPatch before any sandbox is touched: %s\nfix spec.patch in %s and run plan again", ns, ops.Name, problem, manifestName(o.file))}
	}
	for _, c := range sel.Candidates {
		if c.Sandbox.Spec.Template == nil {
			continue
		}
		if added := upgrade.AddedContainers(c.Sandbox.Spec.Template, ops.Spec.Patch.Raw); len(added) > 0 {
			fmt.Fprintf(w, "  warning: the patch adds %s, which sandbox %s's template does not have: %s; if you meant an existing container, fix the name\n", strings.Join(added, ", "), c.Sandbox.Name, upgrade.AddedOutcome(c.Sandbox.Spec.Template, ops.Spec.Patch.Raw))
		}
		if typos := upgrade.MisspeltContainers(c.Sandbox.Spec.Template, ops.Spec.Patch.Raw); len(typos) > 0 {
			fmt.Fprintf(w, "  molt would pause it before its first sandbox: %s looks like a misspelt container name; resume it if the new container is meant\n", strings.Join(typos, ", "))
		}
		break
	}
	if names, added := imagelessAdds(ops, sel); len(names) > 0 {
		c := namedSandboxes(names)
		fmt.Fprintf(w, "  warning: the patch adds %s with no image to %s (%s), whose template has no container of that name: %s pod would be refused, so %s upgrade fails before its backup (PreUpgradeFailed), touching nothing; fix the container's name in the patch, or select only the sandboxes it fits\n",
			strings.Join(added, ", "), c, c.names(), c.its(), c.its())
	}
	if name, paths := upgrade.SelectedBackupOffVolumes(ops, sel); len(paths) > 0 {
		fmt.Fprintf(w, "  warning: %s\n", upgrade.BackupOffVolumesNote(name, paths))
		if !upgrade.PausedOnce(ops, upgrade.AnnotationBackupOffVolume, upgrade.AnnotationBackupOffVolumePausedAt) {
			fmt.Fprintf(w, "  molt would pause it before its first sandbox for this: resume it if the hooks send the backup out of the pod another way\n")
		}
	}
	if own := ownHooksReplaced(ops, sel); len(own) > 0 {
		c := namedSandboxes(own)
		fmt.Fprintf(w, "  warning: %s (%s) %s directly (spec.upgradePolicy) with hooks of %s own in spec.lifecycle, unlike this ops's: this ops's hooks run in %s place (a backup %s own preUpgrade made is not restored by them), and %s come back once this ops has succeeded on %s and ended; one whose upgrade fails keeps this ops's hooks, in its direct upgrades too, until an ops succeeds on it\n",
			c, c.names(), c.verb("upgrades", "upgrade"), c.its(), c.its(), c.its(), c.verb("its own", "theirs"), c.it())
	}
	if skipped := hooksNotRun(ops, sel); len(skipped) > 0 {
		c := namedSandboxes(skipped)
		fmt.Fprintf(w, "  warning: %s (%s) %s a preUpgrade in spec.lifecycle (%s own, or an earlier ops's), and this ops has none: an ops's hooks replace the sandbox's for its upgrade, so they are not run, nothing is backed up, and what %s %s outside persistent volumes is lost; give this ops the lifecycle to run\n",
			c, c.names(), c.verb("has", "have"), c.its(), c.its(), c.verb("pod holds", "pods hold"))
	}
	if bare := withoutAgentRuntime(ops, sel); len(bare) > 0 {
		c := namedSandboxes(bare)
		fmt.Fprintf(w, "  warning: this ops has hooks, and %s (%s) %s not list agent-runtime in spec.runtimes, which hooks run through (the guides ask for `runtimes: [{name: agent-runtime}]`): where %s %s no agent-runtime, the hooks fail as unreachable; add the entry to those sandboxes (to the SandboxSet, for pool members)\n",
			c, c.names(), c.verb("does", "do"), c.its(), c.verb("pod runs", "pods run"))
	}
	unbacked := upgrade.Unprotected(ops, sel)
	if len(unbacked) > 0 {
		c := namedSandboxes(unbacked)
		if lc := ops.Spec.Lifecycle; lc != nil && lc.PostUpgrade != nil {
			fmt.Fprintf(w, "  warning: this ops has a postUpgrade hook but no preUpgrade: %s (%s) %s a new pod with no backup of %s taken by this ops, and postUpgrade then runs on %s: %s workspace is lost, or set back to a backup an earlier upgrade left, if its postUpgrade kept it; if that is not meant, add the preUpgrade that takes the backup\n",
				c, c.names(), c.verb("gets", "get"), c.verb("its own", "theirs"), c.it(), c.its())
		} else {
			fmt.Fprintf(w, "  warning: this ops has no hooks: %s (%s), whose last upgrade restored %s workspace into the pod, %s a new pod and nothing backs it up or restores it: %s workspace is lost; if that is not meant, add the hooks, or select only the failed sandboxes\n",
				c, c.names(), c.its(), c.verb("gets", "get"), c.its())
		}
		if !upgrade.PausedOnce(ops, upgrade.AnnotationNoBackup, upgrade.AnnotationNoBackupPausedAt) {
			fmt.Fprintf(w, "  molt would pause it before its first sandbox for this: resume it if those workspaces may go, or select only the failed sandboxes (agents.kruise.io/upgrade-failed: \"true\")\n")
		}
	}
	if left := upgrade.CheckpointLeftBehind(ops, sel); len(left) > 0 {
		c := namedSandboxes(left)
		fmt.Fprintf(w, "  warning: %s (%s) failed a CheckpointRestore upgrade after %s old pod was gone: %s workspace is kept only in a checkpoint (kubectl get cp -n %s) or a pod restored from it, and this ops, of updateStrategy.type %s, would start %s new pod from an empty filesystem; to restore it, set updateStrategy.type: CheckpointRestore\n",
			c, c.names(), c.its(), c.its(), ops.Namespace, ops.Spec.UpdateStrategy.EffectiveType(), c.its())
		if !upgrade.PausedOnce(ops, upgrade.AnnotationCheckpointKept, upgrade.AnnotationCheckpointKeptPausedAt) {
			fmt.Fprintf(w, "  molt would pause it before its first sandbox for this: resume it if those workspaces may go\n")
		}
	}
	if only := upgrade.OnlyRecreateResumes(ops.Spec.UpdateStrategy.EffectiveType(), failedMessages(sel)); len(only) > 0 {
		c := namedSandboxes(only)
		fmt.Fprintf(w, "  warning: %s (%s) failed in a way no CheckpointRestore resumes (%s failure says %s: no running pod to checkpoint and no checkpoint kept, a paused sandbox, or an image change): this ops would fail %s again at once; resume %s with updateStrategy.type: Recreate and the hooks that keep the workspace\n",
			c, c.names(), c.its(), upgrade.RecreateOnly, c.it(), c.it())
	}
	switch {
	case sel.SelectsNothing():
		fmt.Fprintf(w, "  it selects no sandbox: it would complete at once having upgraded none (NothingSelected); Excluded below says why for each\n")
	case sel.Total() == 0 && len(ops.Spec.Patch.Raw) == 0:
		fmt.Fprintf(w, "  no patch and nothing to resume: it would complete at once (NothingToUpdate)\n")
	case sel.Total() == 0:
		fmt.Fprintf(w, "  every sandbox it selects already has the patched template: it would complete at once (NothingToUpdate)\n")
	}

	fmt.Fprintf(w, "\nSelected (%d), in the order they start, at most %d upgrading (or failed) at a time:\n", sel.Total(), sel.MaxUnavailable)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SANDBOX\tPHASE\tBATCH\tNOTE")
	batch := 0
	for i, c := range sel.Candidates {
		if i%sel.MaxUnavailable == 0 {
			batch++
		}
		note := ""
		if c.Resume {
			if _, reason, ok := upgrade.FailedAttempt(c.Sandbox); ok {
				note = resumeNote(reason)
			}
		}
		if slices.Contains(unbacked, c.Sandbox.Name) {
			note = strings.TrimPrefix(note+"; ", "; ") + "no backup: new pod with no preUpgrade"
		}
		if bare := upgrade.AddedWithoutImage(c.Sandbox.Spec.Template, ops.Spec.Patch.Raw); len(bare) > 0 && (c.State == upgrade.NotStarted || c.Resume) {
			note = strings.TrimPrefix(note+"; ", "; ") + "fails: adds " + strings.Join(bare, ", ") + " with no image"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", c.Sandbox.Name, c.Sandbox.Status.Phase, batch, note)
	}
	_ = tw.Flush()

	fmt.Fprintf(w, "\nExcluded (%d):\n", len(sel.Excluded))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SANDBOX\tREASON\tWHY")
	for _, e := range sel.Excluded {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", e.Sandbox.Name, e.Reason, why(e, ops))
	}
	_ = tw.Flush()

	var diffs []*agentsv1alpha1.Sandbox
	switch {
	case o.all:
		for _, c := range sel.Candidates {
			diffs = append(diffs, c.Sandbox)
		}
	case o.sandbox != "":
		for _, sb := range sandboxes {
			if sb.Name == o.sandbox {
				diffs = append(diffs, sb)
			}
		}
		if len(diffs) == 0 {
			return &exitError{code: ExitError, msg: fmt.Sprintf("flag --sandbox=%s: no such sandbox in namespace %s", o.sandbox, ns)}
		}
	case sel.Total() > 0:
		diffs = append(diffs, sel.Candidates[0].Sandbox)
	}
	for _, sb := range diffs {
		d, err := templateDiff(sb, ops.Spec.Patch.Raw)
		if err != nil {
			fmt.Fprintf(w, "\nSandbox %s: the patch cannot be applied to its template: %v (its upgrade would fail with PreUpgradeFailed, its pod untouched)\n", sb.Name, err)
			continue
		}
		if d == "" {
			fmt.Fprintf(w, "\nSandbox %s: the patched template equals the current one\n", sb.Name)
			continue
		}
		fmt.Fprintf(w, "\nPod template of sandbox %s, current → patched:\n%s", sb.Name, d)
	}
	if refusedNow != "" {
		return &exitError{code: ExitFailed, msg: fmt.Sprintf("SandboxUpdateOps %s/%s cannot be created yet: %s\nthe plan above is what it would do now; apply it once that ops has ended (Completed or Failed) or is gone", ns, ops.Name, refusedNow)}
	}
	return nil
}

// oneActiveOpsPolicy is the ValidatingAdmissionPolicy of deploy/admission
// that refuses a second active ops in a namespace.
const oneActiveOpsPolicy = "molt-one-active-ops-per-namespace"

// decodeOps reads manifest (JSON) as a SandboxUpdateOps of namespace ns,
// refusing unknown fields as the API server's strict validation does.
func decodeOps(manifest []byte, ns string) (*agentsv1alpha1.SandboxUpdateOps, error) {
	dec := json.NewDecoder(bytes.NewReader(manifest))
	dec.DisallowUnknownFields()
	ops := &agentsv1alpha1.SandboxUpdateOps{}
	if err := dec.Decode(ops); err != nil {
		return nil, fmt.Errorf("read the SandboxUpdateOps: %w", err)
	}
	// What the API server would set: the ops is the newest of its
	// namespace, and a generated name no sandbox's label can carry yet
	// ("<" is not allowed in a label value).
	ops.Namespace, ops.UID, ops.CreationTimestamp = ns, "plan", metav1.Now()
	if ops.Name == "" {
		ops.Name = ops.GenerateName + "<generated>"
	}
	return ops, nil
}

// why explains an exclusion in words, with what would change it.
func why(e upgrade.Exclusion, ops *agentsv1alpha1.SandboxUpdateOps) string {
	switch e.Reason {
	case upgrade.ExcludedSelector:
		return "its labels do not match spec.selector (" + e.Detail + ")"
	case upgrade.ExcludedDeleting:
		return "it is being deleted"
	case upgrade.ExcludedFinished:
		return "phase " + e.Detail + ": the sandbox has ended"
	case upgrade.ExcludedPoolMember:
		return "a member of SandboxSet " + e.Detail + "'s warm pool: the set's own rolling update upgrades it (edit the set's template)"
	case upgrade.ExcludedOtherOps:
		return "claimed by SandboxUpdateOps " + e.Detail + ", which is active"
	case upgrade.ExcludedDirectUpgrade:
		return "a direct upgrade of its own (spec.upgradePolicy) is in " + e.Detail + ": this ops leaves it out; apply it once that upgrade ends"
	case upgrade.ExcludedStateFilter:
		var states []string
		for _, p := range ops.Spec.StateFilter.EligiblePhases() {
			states = append(states, string(p))
		}
		if e.Detail == "" {
			// statusagg has written no status yet: just created, or no
			// statusagg leads (one restarted waits for its lease).
			return fmt.Sprintf("no phase yet (the sandbox was just created, or no statusagg has written its status: is one running and leading?), so it is not in spec.stateFilter.states [%s]", strings.Join(states, ", "))
		}
		return fmt.Sprintf("phase %s is not in spec.stateFilter.states [%s]", e.Detail, strings.Join(states, ", "))
	case upgrade.ExcludedNoNeed:
		return "its template already equals the patched one (no need to update)"
	}
	return e.Detail
}

// patchProblem is what the selector's patch check would find, before it
// admits the first sandbox ("" when the patch passes).
func patchProblem(ctx context.Context, kube kubernetes.Interface, ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) (string, error) {
	raw := ops.Spec.Patch.Raw
	if problem := upgrade.PatchAloneProblem(raw); problem != "" {
		return problem, nil
	}
	// As the selector does: a candidate whose own template leaves the question
	// open (none, unreadable, the patch does not apply, refused without the
	// patch too) hands it to the next, up to planCheckTries of them.
	tries := 0
	for _, c := range sel.Candidates {
		sb := c.Sandbox
		if tries == planCheckTries {
			break
		}
		tries++
		if sb.Spec.Template == nil {
			continue
		}
		patched, err := upgrade.ApplyPatch(sb.Spec.Template, raw)
		if problem := upgrade.MergeKeyProblem(sb.Name, err); problem != "" {
			return problem, nil
		}
		if err != nil {
			continue
		}
		refusedPatched, err := upgrade.DryRunCreatePod(ctx, kube, upgrade.PodFrom(sb.Namespace, sb.Name, patched))
		if err != nil || refusedPatched == "" {
			return "", err
		}
		refusedOriginal, err := upgrade.DryRunCreatePod(ctx, kube, upgrade.PodFrom(sb.Namespace, sb.Name, sb.Spec.Template))
		if err != nil {
			return "", err
		}
		if refusedOriginal != "" {
			continue
		}
		return fmt.Sprintf("spec.patch makes a pod the API server refuses (checked on sandbox %s): %s", sb.Name, refusedPatched), nil
	}
	return "", nil
}

// planCheckTries is the selector's patchCheckTries: how many candidates the
// patch check tries before it lets the patch pass without a verdict.
const planCheckTries = 3

// templateDiff is the unified diff between sb's pod template and the
// patched one, as YAML ("" when they are equal).
func templateDiff(sb *agentsv1alpha1.Sandbox, patch []byte) (string, error) {
	cur := sb.Spec.Template
	if cur == nil {
		cur = &corev1.PodTemplateSpec{}
	}
	patched, err := upgrade.ApplyPatch(cur, patch)
	if err != nil {
		return "", err
	}
	a, err := yaml.Marshal(cur)
	if err != nil {
		return "", fmt.Errorf("encode the template of sandbox %s: %w", sb.Name, err)
	}
	b, err := yaml.Marshal(patched)
	if err != nil {
		return "", fmt.Errorf("encode the patched template of sandbox %s: %w", sb.Name, err)
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(strings.TrimSuffix(string(a), "\n")), B: difflib.SplitLines(strings.TrimSuffix(string(b), "\n")),
		FromFile: sb.Namespace + "/" + sb.Name + " (current)", ToFile: sb.Namespace + "/" + sb.Name + " (patched)",
		Context: 3,
	})
}

// more is " and N more" for n > 0, else "".
func more(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" and %d more", n)
}

// resumeNote says where a sandbox left failed in reason is resumed from.
func resumeNote(reason string) string {
	at := upgrade.ResumeStage(reason)
	if at == agentsv1alpha1.UpgradingReasonPreUpgrade {
		return fmt.Sprintf("resumes the failed attempt (%s) from PreUpgrade; its pod was never replaced, and is kept (under Recreate) if it already runs the patched template", reason)
	}
	if at == agentsv1alpha1.UpgradingReasonPostUpgrade {
		// ResumeAt: PostUpgrade only on a Ready pod that already runs the
		// patched template (and holds its checkpoint, under CheckpointRestore).
		return fmt.Sprintf("resumes the failed attempt (%s) from PostUpgrade if its pod already runs the patched template, else from UpgradePod (the pod is rebuilt, the backup kept; from PreUpgrade if its original pod is still there)", reason)
	}
	if upgrade.Rank(at) < upgrade.Rank(agentsv1alpha1.UpgradingReasonUpgradePod) {
		// upgrade.ResumeAt: a stage before UpgradePod (Resuming,
		// Checkpointing) is never resumed on a pod the attempt did not keep;
		// the original pod goes back to PreUpgrade, anything else is rebuilt.
		at = agentsv1alpha1.UpgradingReasonUpgradePod
	}
	return fmt.Sprintf("resumes the failed attempt (%s) from %s (from PreUpgrade if its original pod is still there)", reason, at)
}

// patchNulls lists the fields a patch sets to null (a Strategic Merge Patch's
// way to remove them), by path, "spec.containers" aside (molt drops that one,
// as an empty PodSpec serialises to it).
func patchNulls(raw []byte) []string {
	var doc any
	if json.Unmarshal(raw, &doc) != nil {
		return nil
	}
	var out []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch t := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(t)) {
				p := strings.TrimPrefix(path+"."+k, ".")
				if t[k] == nil {
					if p != "spec.containers" {
						out = append(out, p)
					}
					continue
				}
				walk(p, t[k])
			}
		case []any:
			for i, e := range t {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", doc)
	return out
}
