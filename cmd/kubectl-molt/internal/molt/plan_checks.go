package molt

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// withGenerateName is manifest with its metadata.name turned into a
// generateName, so that a dry-run create does not meet an ops of that name.
func withGenerateName(manifest []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(manifest, &doc); err != nil {
		return nil, err
	}
	meta, ok := doc["metadata"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("no metadata")
	}
	name, _ := meta["name"].(string)
	delete(meta, "name")
	meta["generateName"] = name + "-"
	return json.Marshal(doc)
}

// withoutAgentRuntime names the sandboxes sel would upgrade whose
// spec.runtimes lists no agent-runtime, when ops has a hook; nil otherwise.
func withoutAgentRuntime(ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) []string {
	if lc := ops.Spec.Lifecycle; lc == nil || (lc.PreUpgrade == nil && lc.PostUpgrade == nil) {
		return nil
	}
	var out []string
	for _, c := range sel.Candidates {
		if c.State == upgrade.Updated || upgrade.HasAgentRuntime(c.Sandbox) {
			continue
		}
		out = append(out, c.Sandbox.Name)
	}
	return out
}

// imagelessAdds names the sandboxes sel would start whose template the patch
// adds a container with no image to (upgrade.ImagelessAdds: their pod would
// be refused, and the patcher fails them before their backup), and those
// containers.
func imagelessAdds(ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) (names, added []string) {
	var starts []*agentsv1alpha1.Sandbox
	for _, c := range sel.Candidates {
		if c.State == upgrade.NotStarted || c.Resume {
			starts = append(starts, c.Sandbox)
		}
	}
	return upgrade.ImagelessAdds(ops.Spec.Patch.Raw, starts)
}

// ownHooksReplaced names the sandboxes sel would start that have a direct
// upgrade policy and hooks of their own unlike the ops's: the patcher writes
// the ops's spec.lifecycle into each sandbox in place of its own (hookrunner
// runs the sandbox's) for this upgrade, and the selector puts theirs back
// once it has succeeded and the ops has ended (upgrade.AnnotationOwnLifecycle).
func ownHooksReplaced(ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) []string {
	var out []string
	for _, c := range sel.Candidates {
		sb := c.Sandbox
		if (c.State != upgrade.NotStarted && !c.Resume) || sb.Spec.UpgradePolicy == nil || sb.Spec.Lifecycle == nil ||
			(sb.Spec.Lifecycle.PreUpgrade == nil && sb.Spec.Lifecycle.PostUpgrade == nil) || equality.Semantic.DeepEqual(sb.Spec.Lifecycle, ops.Spec.Lifecycle) {
			continue
		}
		out = append(out, sb.Name)
	}
	return out
}

// hooksNotRun names the sandboxes sel would start that carry a preUpgrade in
// spec.lifecycle (their own, or one an earlier ops wrote) when ops has none:
// an ops's hooks replace the sandbox's for its upgrade, so nothing is backed
// up and, outside persistent volumes, their workspaces are lost (a walk
// expected the sandboxes' own hooks to run). A resume of a failure past the
// backup is not one: the failed attempt's preUpgrade took it, and the
// resume goes on after it (the guides' postUpgrade-only ops for a
// PostUpgradeFailed sandbox; a walk was told to add the preUpgrade they
// leave out). Nor is a rollback of a failure before the backup that keeps
// the pod (upgrade.RollbackKeepsPod: the guides' rollback after
// PreUpgradeFailed, whose Ready pod is not replaced, as the plan's note says).
func hooksNotRun(ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) []string {
	if lc := ops.Spec.Lifecycle; lc != nil && lc.PreUpgrade != nil {
		return nil
	}
	var out []string
	for _, c := range sel.Candidates {
		sb := c.Sandbox
		if (c.State != upgrade.NotStarted && !c.Resume) || sb.Spec.Lifecycle == nil || sb.Spec.Lifecycle.PreUpgrade == nil || resumesPastBackup(c, sel.PodOf) ||
			(c.Resume && sel.PodOf != nil && upgrade.RollbackKeepsPod(sb, ops, sel.PodOf(sb))) {
			continue
		}
		out = append(out, sb.Name)
	}
	return out
}

// resumesPastBackup reports whether c resumes a failed attempt from a stage
// after its backup (upgrade.ResumeStage of its failure), on a pod that
// attempt built: its original pod still there (podOf; a new pod refused
// before the old one was deleted) is backed up again (upgrade.ResumeAt),
// and without a preUpgrade what it has held since the failed attempt's
// backup is lost.
func resumesPastBackup(c upgrade.Candidate, podOf upgrade.PodOf) bool {
	if !c.Resume {
		return false
	}
	reason, ok := upgrade.ReasonFor(c.Sandbox, upgrade.CurrentAttempt(c.Sandbox))
	if !ok || upgrade.Rank(upgrade.ResumeStage(reason)) <= upgrade.Rank(agentsv1alpha1.UpgradingReasonPreUpgrade) {
		return false
	}
	return podOf == nil || !upgrade.KeepsOriginalPod(c.Sandbox, podOf(c.Sandbox))
}

// sandboxPods is an upgrade.PodOf from the pods of namespace ns, listed once
// when sel resumes a failed sandbox (a resume's first stage depends on its
// pod); nil when it resumes none, or the pods cannot be listed (the checks
// then take each resume at its failure's stage, as without them).
func sandboxPods(ctx context.Context, kube kubernetes.Interface, ns string, sel upgrade.Selection) upgrade.PodOf {
	if !slices.ContainsFunc(sel.Candidates, func(c upgrade.Candidate) bool { return c.Resume }) {
		return nil
	}
	list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	byName := make(map[string]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	return func(sb *agentsv1alpha1.Sandbox) *corev1.Pod {
		if pod := byName[sb.Name]; pod != nil && upgrade.ControlledBy(pod, sb.UID) {
			return pod
		}
		return nil
	}
}

// failedMessages maps each selected sandbox left failed by an earlier
// upgrade to its Upgrading condition's message.
func failedMessages(sel upgrade.Selection) map[string]string {
	out := map[string]string{}
	for _, c := range sel.Candidates {
		if c.Sandbox.Labels[agentsv1alpha1.LabelUpgradeFailed] != "true" {
			continue
		}
		if up := meta.FindStatusCondition(c.Sandbox.Status.Conditions, agentsv1alpha1.ConditionUpgrading); up != nil && agentsv1alpha1.IsUpgradingFailedReason(up.Reason) {
			out[c.Sandbox.Name] = up.Message
		}
	}
	return out
}

// namedSandboxes are the sandboxes a warning of plan is about: it names
// the first five, and its words agree with their count.
type namedSandboxes []string

// String is "1 sandbox" or "N sandboxes".
func (s namedSandboxes) String() string { return upgrade.Sandboxes(len(s)) }

// names lists the first five, and how many more there are.
func (s namedSandboxes) names() string {
	return strings.Join(s[:min(len(s), 5)], ", ") + more(len(s)-5)
}

// verb is one for one sandbox, else many.
func (s namedSandboxes) verb(one, many string) string { return upgrade.Agree(len(s), one, many) }

func (s namedSandboxes) its() string { return s.verb("its", "their") }

func (s namedSandboxes) it() string { return s.verb("it", "them") }
