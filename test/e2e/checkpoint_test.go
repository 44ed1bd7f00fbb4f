package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/devruntime"
	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// sidecarOps is seed 000's CheckpointRestore example (upgrade-sidecar) with
// the selector the guide's snippet omits (an ops without one is refused),
// in namespace ns, named name, with the annotation value value.
func sidecarOps(t *testing.T, ns, name, pool, value string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Get(t).RootDir, "test", "seeds", "manifests", "000-04-sandboxupdateops-upgrade-sidecar.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(data), "namespace: default", "namespace: "+ns, 1)
	y = strings.Replace(y, "name: upgrade-sidecar", "name: "+name, 1)
	y = strings.Replace(y, "spec:\n", fmt.Sprintf("spec:\n  selector:\n    matchLabels:\n      %s: %s\n", poolLabel, pool), 1)
	y = strings.Replace(y, `"20260714"`, `"`+value+`"`, 1)
	if !strings.Contains(y, "type: CheckpointRestore") || !strings.Contains(y, value) {
		t.Fatalf("seed 000-04 is not the CheckpointRestore example this test expects:\n%s", y)
	}
	return y
}

// TestCheckpointRestoreKeepsThePodsOwnFiles (issue 9): seed 000's sidecar
// CheckpointRestore example recreates each pod and keeps what the pod wrote
// in its own root (not a volume): the development checkpointer snapshots
// the old pod and restores the new one before it is Ready; the attempt's
// checkpoints are deleted afterwards. A checkpoint made to fail gives
// CheckpointFailed with the old pod untouched, and a new ops then succeeds
// with a new checkpoint.
func TestCheckpointRestoreKeepsThePodsOwnFiles(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "ck", 2, "ck-pool", nil)
	for _, n := range names {
		if _, code := sh(t, s, ns, n, "echo kept-$(hostname) > /root/kept.txt"); code != 0 {
			t.Fatalf("write into %s's root: exit %d", n, code)
		}
	}
	before := podUIDs(t, s, ns, names)
	kubectl(t, sidecarOps(t, ns, "ck-1", "ck-pool", "v1"), "apply", "-f", "-")
	ops := waitOps(t, s, ns, "ck-1", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if st := ops.Status; st.Replicas != 2 || st.UpdatedReplicas != 2 {
		t.Fatalf("ops status %+v, want 2 2 0 0", st)
	}
	after := podUIDs(t, s, ns, names)
	for _, n := range names {
		if after[n] == before[n] {
			t.Errorf("%s: pod not recreated (uid %s)", n, after[n])
		}
		if out, _ := sh(t, s, ns, n, "cat /root/kept.txt"); strings.TrimSpace(out) != "kept-"+n {
			t.Errorf("%s: /root/kept.txt is %q after CheckpointRestore, want %q", n, out, "kept-"+n)
		}
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Annotations["agents.kruise.io/upgrade-sidecar"] != "v1" {
			t.Errorf("%s: new pod lacks the patched annotation: %v", n, pod.Annotations)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the attempt's checkpoints deleted", func() (bool, error) {
		list, err := s.agents.AgentsV1alpha1().Checkpoints(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(list.Items) == 0, fmt.Errorf("%d checkpoints left", len(list.Items))
	})

	// A checkpoint that fails.
	failing := names[0]
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"disk full (test)"}}}`, devruntime.AnnotationFailCheckpoint)
	if _, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, failing, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	before = podUIDs(t, s, ns, names)
	kubectl(t, sidecarOps(t, ns, "ck-2", "ck-pool", "v2"), "apply", "-f", "-")
	waitOps(t, s, ns, "ck-2", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	c := upgradingCondition(t, s, ns, failing)
	if c == nil || c.Reason != agentsv1alpha1.UpgradingReasonCheckpointFailed || !strings.Contains(c.Message, "disk full (test)") || !strings.Contains(c.Message, "did not delete the old pod") {
		t.Fatalf("%s Upgrading = %+v, want CheckpointFailed with the checkpointer's message and the kept pod", failing, c)
	}
	if now := podUIDs(t, s, ns, []string{failing}); now[failing] != before[failing] {
		t.Fatalf("%s: pod replaced although its checkpoint failed", failing)
	}

	// Fixed: a new ops takes a new checkpoint and succeeds.
	patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, devruntime.AnnotationFailCheckpoint)
	if _, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, failing, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "", "delete", "suo", "ck-2", "-n", ns)
	kubectl(t, sidecarOps(t, ns, "ck-3", "ck-pool", "v3"), "apply", "-f", "-")
	waitOps(t, s, ns, "ck-3", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if out, _ := sh(t, s, ns, failing, "cat /root/kept.txt"); strings.TrimSpace(out) != "kept-"+failing {
		t.Errorf("%s: /root/kept.txt is %q after the retried CheckpointRestore", failing, out)
	}
	if now := podUIDs(t, s, ns, []string{failing}); now[failing] == before[failing] {
		t.Errorf("%s: pod not recreated by the retried CheckpointRestore", failing)
	}
}

// TestRetryRefusesACheckpointRestoreOnlyRecreateResumes: a paused sandbox
// whose CheckpointRestore failed (its checkpointer refused) is paused again
// with its pod stopped, and no CheckpointRestore ops can resume it. A walk
// saw the ops's condition offer `kubectl molt retry`, and the retry fail
// again within a second: now the ops's condition names the Recreate ops to
// create, and the retry refuses, saying the same, and creates nothing.
func TestRetryRefusesACheckpointRestoreOnlyRecreateResumes(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	const pool = "crp-pool"
	names := makeSandboxes(t, s, ns, "crp", 1, pool, func(sb *agentsv1alpha1.Sandbox) {
		sb.Annotations = map[string]string{devruntime.AnnotationFailCheckpoint: "store offline (test)"}
	})
	pause(t, s, ns, names)
	y := strings.Replace(sidecarOps(t, ns, "crp", pool, "crp-1"), "spec:\n", "spec:\n  stateFilter:\n    states: [Paused]\n", 1)
	kubectl(t, y, "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "crp", agentsv1alpha1.SandboxUpdateOpsFailed, 3*time.Minute)
	if c := upgradingCondition(t, s, ns, names[0]); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonCheckpointFailed {
		t.Fatalf("Upgrading of %s = %+v, want CheckpointFailed", names[0], c)
	}
	budget := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionFailureBudgetExhausted)
	if budget == nil || !strings.Contains(budget.Message, "updateStrategy.type Recreate") || strings.Contains(budget.Message, "kubectl molt retry") {
		t.Errorf("the ops's failure %+v: want the Recreate ops to create, not a retry", budget)
	}

	// plan of a new CheckpointRestore ops that selects it says the same.
	again := strings.Replace(y, "name: crp\n", "name: crp-again\n", 1)
	planOut, planErr, _ := molt(t, again, "plan", "-f", "-", "-n", ns)
	if !strings.Contains(planOut, "failed in a way no CheckpointRestore resumes") || !strings.Contains(planOut, names[0]) {
		t.Errorf("plan of a CheckpointRestore ops selecting %s does not warn that it would fail again:\n%s%s", names[0], planOut, planErr)
	}

	out, errOut, code := molt(t, "", "retry", "crp", "-n", ns)
	t.Logf("retry:\n%s%s", out, errOut)
	if code != 2 || !strings.Contains(errOut, "cannot be retried, nothing was changed") || !strings.Contains(errOut, "updateStrategy.type Recreate") || !strings.Contains(errOut, names[0]) {
		t.Errorf("retry of a CheckpointRestore only Recreate resumes: exit %d, want 2 and the Recreate way:\n%s%s", code, out, errOut)
	}
	list, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d ops after the refused retry, want only crp", len(list.Items))
	}
}
