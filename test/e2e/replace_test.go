package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A sandbox replaced mid-upgrade by its manifest from before the ops (`kubectl
// replace -f`, as a GitOps sync by replace does) loses the ops label, the claim
// annotation and the patched template at once. The ops keeps counting it, the
// selector puts the label and the claim back, and since its template no longer
// carries the patch it fails UpgradePod, naming the ops, with its old pod and
// workspace kept and the upgrade-failed label set; the other sandbox upgrades.
// Before (walk 8), the ops dropped it from TOTAL and completed 1/1, and the
// sandbox failed a minute later with no failure label, its Event naming a
// direct upgrade.
func TestSandboxReplacedByItsOldManifestMidUpgrade(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	names := workspaceSandboxes(t, s, ns, "rp", "rp-pool", "/mnt/shared", "/data/"+ns+"/$NAME/shared", 2)
	before := podUIDs(t, s, ns, names)
	old, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "rp-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	manifest := agentsv1alpha1.Sandbox{TypeMeta: metav1.TypeMeta{APIVersion: "agents.kruise.io/v1alpha1", Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{Name: old.Name, Namespace: old.Namespace, Labels: old.Labels, Annotations: old.Annotations},
		Spec:       old.Spec}
	body, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}

	ops := strings.Replace(hookOps("up", "rp-pool", "my-registry/sandbox-image:v2", "sleep 15; "+backupHook, restoreHook, 60), "maxUnavailable: 1", "maxUnavailable: 2", 1)
	kubectl(t, ops, "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, 2*time.Minute, "rp-00 in PreUpgrade, claimed and patched", func() (bool, error) {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "rp-00", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonPreUpgrade && sb.Annotations[upgrade.AnnotationClaim] != "" &&
			sb.Spec.Template.Spec.Containers[0].Image == "my-registry/sandbox-image:v2", fmt.Errorf("Upgrading %+v, annotations %v", c, sb.Annotations)
	})
	kubectl(t, string(body), "replace", "-f", "-")

	final := waitEnded(t, s, ns, "up", 3*time.Minute)
	if st := final.Status; st.Replicas != 2 || st.UpdatedReplicas != 1 || st.FailedReplicas != 1 || st.UpdatingReplicas != 0 {
		t.Errorf("ops up ended %s with total %d, updated %d, failed %d, updating %d; want 2, 1, 1, 0 (rp-00 still its own, failed)",
			final.Status.Phase, st.Replicas, st.UpdatedReplicas, st.FailedReplicas, st.UpdatingReplicas)
	}
	sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "rp-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed || !strings.Contains(c.Message, "SandboxUpdateOps up") || !strings.Contains(c.Message, "no longer carries the patch") {
		t.Errorf("rp-00: Upgrading %+v; want UpgradePodFailed: its template no longer carries the patch of SandboxUpdateOps up", c)
	}
	if sb.Labels[agentsv1alpha1.LabelUpgradeFailed] != "true" {
		t.Errorf("rp-00: labels %v; want %s=true, so that a new ops (or a retry) finds it", sb.Labels, agentsv1alpha1.LabelUpgradeFailed)
	}
	now := podUIDs(t, s, ns, names)
	if now["rp-00"] != before["rp-00"] {
		t.Errorf("rp-00's pod was replaced (%s → %s), want it kept: its template is the old one again", before["rp-00"], now["rp-00"])
	}
	if got := workspaceFile(t, s, ns, "rp-00"); got != "data-rp-00" {
		t.Errorf("rp-00's workspace = %q, want data-rp-00", got)
	}
	if now["rp-01"] == before["rp-01"] {
		t.Errorf("rp-01's pod was not replaced")
	}
	if got := workspaceFile(t, s, ns, "rp-01"); got != "data-rp-01" {
		t.Errorf("rp-01's workspace = %q, want data-rp-01 (restored)", got)
	}
	list, err := s.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=rp-00,reason=" + agentsv1alpha1.UpgradingReasonUpgradePodFailed})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 || !strings.Contains(list.Items[0].Message, "SandboxUpdateOps up") || strings.Contains(list.Items[0].Message, "direct upgrade") {
		t.Errorf("rp-00's UpgradePodFailed Events %v; want one naming SandboxUpdateOps up, not a direct upgrade", list.Items)
	}
}
