package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
)

// podUIDs returns each named sandbox's pod UID.
func podUIDs(t *testing.T, s *stack, ns string, names []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names {
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get pod %s: %v", n, err)
		}
		out[n] = string(pod.UID)
	}
	return out
}

// opsWithPatch is an ops over pool with a raw YAML patch (indented under spec.patch).
func opsWithPatch(name, pool, maxUnavailable, patch string) string {
	return fmt.Sprintf("apiVersion: agents.kruise.io/v1alpha1\nkind: SandboxUpdateOps\nmetadata:\n  name: %s\nspec:\n  selector:\n    matchLabels:\n      %s: %s\n  updateStrategy:\n    maxUnavailable: %s\n  patch:\n%s",
		name, poolLabel, pool, maxUnavailable, patch)
}

// assertUntouched checks that no sandbox was claimed and every pod kept its UID.
func assertUntouched(t *testing.T, s *stack, ns string, before map[string]string) {
	t.Helper()
	after := podUIDs(t, s, ns, keys(before))
	for n, uid := range before {
		if after[n] != uid {
			t.Errorf("sandbox %s: pod replaced (%s -> %s), want untouched", n, uid, after[n])
		}
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" || sb.Status.Phase != agentsv1alpha1.SandboxRunning {
			t.Errorf("sandbox %s: label %q phase %s, want unclaimed and Running", n, sb.Labels[agentsv1alpha1.LabelUpdateOps], sb.Status.Phase)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// invalidPatchCondition waits (30 s, as issue 7 asks) for the ops to fail with InvalidPatch.
func invalidPatchCondition(t *testing.T, s *stack, ns, name string) *metav1.Condition {
	t.Helper()
	ops := waitOps(t, s, ns, name, agentsv1alpha1.SandboxUpdateOpsFailed, 30*time.Second)
	c := meta.FindStatusCondition(ops.Status.Conditions, "InvalidPatch")
	if c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("ops %s: InvalidPatch condition = %+v, want True (conditions %+v)", name, c, ops.Status.Conditions)
	}
	return c
}

// Finding 1: a patch that yields a pod the API server refuses (an empty image) fails the
// ops with InvalidPatch before any sandbox is touched: every old pod keeps its UID.
func TestPatchMakingAnInvalidPodFailsTheOpsAndTouchesNothing(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "inv", 3, "inv-pool", nil)
	before := podUIDs(t, s, ns, names)
	kubectl(t, opsWithPatch("inv", "inv-pool", "1", "    spec:\n      containers:\n      - name: sandbox\n        image: \"\"\n"), "apply", "-n", ns, "-f", "-")
	c := invalidPatchCondition(t, s, ns, "inv")
	if !strings.Contains(c.Message, "spec.containers[0].image") || !strings.Contains(c.Message, "Required value") {
		t.Errorf("InvalidPatch message %q: want the field and the API server's words", c.Message)
	}
	testenv.Consistently(t, 3*time.Second, "no sandbox claimed by the refused ops", func() (bool, error) {
		list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(context.Background(), metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelUpdateOps})
		return err == nil && len(list.Items) == 0, err
	})
	assertUntouched(t, s, ns, before)
}

// Finding 2: a typo the strategic merge cannot apply, with backup hooks: the ops fails
// with InvalidPatch and touches nothing; the fixed ops with the same hooks completes and
// every workspace is restored, each backed up exactly once.
func TestTypoInThePatchThenTheFixedOpsKeepsEveryWorkspace(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	names := workspaceSandboxes(t, s, ns, "typo", "typo-pool", "/mnt/shared", "/data/$NAME/shared", 2)
	before := podUIDs(t, s, ns, names)
	bad := hookOps("typo", "typo-pool", "", backupHook, restoreHook, 30)
	bad = strings.Replace(bad, "  lifecycle:\n", "  patch:\n    spec:\n      containerz:\n      - name: sandbox\n        image: my-registry/sandbox-image:v2\n  lifecycle:\n", 1)
	kubectl(t, bad, "apply", "-n", ns, "-f", "-")
	c := invalidPatchCondition(t, s, ns, "typo")
	if !strings.Contains(c.Message, "containerz") {
		t.Errorf("InvalidPatch message %q does not name the unknown field containerz", c.Message)
	}
	assertUntouched(t, s, ns, before)

	kubectl(t, "", "delete", "suo", "typo", "-n", ns, "--wait=true", "--timeout=60s")
	kubectl(t, hookOps("fixed", "typo-pool", "my-registry/sandbox-image:v2", backupHook, restoreHook, 30), "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "fixed", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)
	if st := ops.Status; st.Replicas != 2 || st.UpdatedReplicas != 2 || st.FailedReplicas != 0 {
		t.Fatalf("fixed ops status %+v, want 2 2 0 0", st)
	}
	for _, n := range names {
		if got := workspaceFile(t, s, ns, n); got != "data-"+n {
			t.Errorf("%s: workspace after the fixed ops = %q, want data-%s", n, got, n)
		}
		if out, _ := sh(t, s, ns, n, "cat /mnt/shared/pre-runs-$(hostname)"); strings.Count(out, "run") != 1 {
			t.Errorf("%s: preUpgrade ran %d times, want once", n, strings.Count(out, "run"))
		}
	}
}

// A patch that works on one sandbox's template but not on another's fails only that
// sandbox, before its pod is touched (the dry run refuses it), and a new ops resumes it
// at PreUpgrade: the original pod is still there, so the backup is taken again from it.
func TestPatchRefusedForOneSandboxFailsItAloneBeforeItsPodIsTouched(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "one", 2, "one-pool", func(sb *agentsv1alpha1.Sandbox) {
		if sb.Name == "one-00" { // only the first has the volume the patch mounts
			sb.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "extra", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}
	})
	before := podUIDs(t, s, ns, names)
	patch := "    spec:\n      containers:\n      - name: sandbox\n        image: my-registry/sandbox-image:v2\n        volumeMounts:\n        - name: extra\n          mountPath: /extra\n"
	kubectl(t, opsWithPatch("one", "one-pool", "2", patch), "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "one", agentsv1alpha1.SandboxUpdateOpsFailed, 2*time.Minute)
	if st := ops.Status; st.Replicas != 2 || st.UpdatedReplicas != 1 || st.FailedReplicas != 1 {
		t.Fatalf("ops status %+v, want 2 1 0 1", st)
	}
	c := upgradingCondition(t, s, ns, "one-01")
	if c == nil || c.Reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed || !strings.Contains(c.Message, "volumeMounts[0].name") || !strings.Contains(c.Message, "was not deleted") {
		t.Fatalf("one-01 Upgrading = %+v, want UpgradePodFailed naming the refused field and the kept pod", c)
	}
	if after := podUIDs(t, s, ns, []string{"one-01"}); after["one-01"] != before["one-01"] {
		t.Fatalf("one-01: pod replaced although its new pod was refused")
	}
	// The Warning Event's reason is the failed reason, as upstream's.
	testenv.Eventually(t, 30*time.Second, "UpgradePodFailed Warning Event on one-01", func() (bool, error) {
		list, err := s.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=one-01,reason=UpgradePodFailed"})
		return err == nil && len(list.Items) > 0 && list.Items[0].Type == corev1.EventTypeWarning, err
	})
}

// Finding 3: deleting an ops while its sandboxes run a 15-second preUpgrade strands none:
// the delete returns once their attempts end, each sandbox is Running (or resumable), and
// a new ops completes them all.
func TestDeletingAnOpsMidUpgradeStrandsNothing(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	names := workspaceSandboxes(t, s, ns, "del", "del-pool", "/mnt/shared", "/data/$NAME/shared", 3)
	y := strings.Replace(hookOps("del", "del-pool", "my-registry/sandbox-image:v2", "sleep 15; "+backupHook, restoreHook, 40), "maxUnavailable: 1", "maxUnavailable: 3", 1)
	kubectl(t, y, "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, time.Minute, "all three in PreUpgrade", func() (bool, error) {
		for _, n := range names {
			if c := upgradingCondition(t, s, ns, n); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPreUpgrade {
				return false, fmt.Errorf("%s: %+v", n, c)
			}
		}
		return true, nil
	})
	start := time.Now()
	kubectl(t, "", "delete", "suo", "del", "-n", ns, "--wait=true", "--timeout=90s")
	t.Logf("kubectl delete suo returned after %s", time.Since(start).Round(time.Second))
	for _, n := range names {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		up := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
		running := sb.Status.Phase == agentsv1alpha1.SandboxRunning && up != nil && up.Reason == agentsv1alpha1.UpgradingReasonSucceeded
		resumable := sb.Status.Phase == agentsv1alpha1.SandboxUpgrading && up != nil && agentsv1alpha1.IsUpgradingFailedReason(up.Reason)
		if !running && !resumable {
			t.Errorf("%s after the delete: phase %s Upgrading %+v, want Running or a failed reason", n, sb.Status.Phase, up)
		}
		if sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" {
			t.Errorf("%s still carries the deleted ops's label", n)
		}
		// Finding 4: an ops leaves no spec.upgradePolicy behind.
		if sb.Spec.UpgradePolicy != nil {
			t.Errorf("%s: spec.upgradePolicy = %+v after the ops, want none", n, sb.Spec.UpgradePolicy)
		}
	}
	kubectl(t, hookOps("again", "del-pool", "my-registry/sandbox-image:v3", backupHook, restoreHook, 30), "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "again", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)
	if st := ops.Status; st.Replicas != 3 || st.UpdatedReplicas != 3 || st.UpdatingReplicas != 0 || st.FailedReplicas != 0 {
		t.Fatalf("new ops status %+v, want 3 3 0 0", st)
	}
	for _, n := range names {
		if got := workspaceFile(t, s, ns, n); got != "data-"+n {
			t.Errorf("%s: workspace = %q, want data-%s", n, got, n)
		}
	}
}

// Attempt ids are unique per attempt: a direct upgrade A→B→A reaches Succeeded each
// time (the third attempt's events are not dropped as duplicates of the first's).
func TestDirectUpgradeBackAndForth(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "aba", 1, "aba-pool", func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
	})
	for _, image := range []string{"my-registry/sandbox-image:v2", "my-registry/sandbox-image:v1", "my-registry/sandbox-image:v2"} {
		kubectl(t, "", "patch", "sandbox", "aba-00", "-n", ns, "--type=merge", "-p",
			fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":%q}]}}}}`, image))
		waitDirectUpgraded(t, s, ns, "aba-00", image)
	}
}

// waitDirectUpgraded waits until sandbox ns/name's direct upgrade Succeeded
// and it runs Running on a pod of image.
func waitDirectUpgraded(t *testing.T, s *stack, ns, name, image string) {
	t.Helper()
	ctx := context.Background()
	// The edit's generation: a Succeeded recorded before it (an ops's, or
	// the last attempt's) is not this upgrade's. Until statusagg has handled
	// the attempt's first event (it lags under load), the old Succeeded
	// still shows while the phase follows the pods: the new pod, which runs
	// the image, is Running before its postUpgrade (README, direct upgrades).
	edited, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "direct upgrade of "+name+" to "+image, func() (bool, error) {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		up := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
		ok := up != nil && up.Reason == agentsv1alpha1.UpgradingReasonSucceeded && up.ObservedGeneration >= edited.Generation &&
			sb.Status.Phase == agentsv1alpha1.SandboxRunning && pod.Spec.Containers[0].Image == image
		return ok, fmt.Errorf("phase %s upgrading %+v (edit's generation %d) pod image %s", sb.Status.Phase, up, edited.Generation, pod.Spec.Containers[0].Image)
	})
}

// The stream deleted mid-upgrade: every sandbox still reaches a terminal state (Succeeded
// or a failed reason) within its deadlines; the services re-create the stream and their
// consumers, and the watchdog re-drives or fails what the deletion lost.
func TestStreamDeletedMidUpgrade(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	names := workspaceSandboxes(t, s, ns, "str", "str-pool", "/mnt/shared", "/data/$NAME/shared", 4)
	y := strings.Replace(hookOps("str", "str-pool", "my-registry/sandbox-image:v2", "sleep 3; "+backupHook, restoreHook, 20), "maxUnavailable: 1", "maxUnavailable: 4", 1)
	kubectl(t, y, "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, time.Minute, "sandboxes in PreUpgrade", func() (bool, error) {
		c := upgradingCondition(t, s, ns, names[0])
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonPreUpgrade, fmt.Errorf("%+v", c)
	})
	nc := s.env.NATSConnect(t, "", "admin")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, events.StreamName); err != nil {
		t.Fatalf("delete stream: %v", err)
	}
	// PreUpgrade's deadline here: patch 5s + hook 20s + margin 5s, re-driven twice.
	testenv.Eventually(t, 4*time.Minute, "every sandbox terminal", func() (bool, error) {
		for _, n := range names {
			c := upgradingCondition(t, s, ns, n)
			if c == nil || !(c.Reason == agentsv1alpha1.UpgradingReasonSucceeded || agentsv1alpha1.IsUpgradingFailedReason(c.Reason)) {
				return false, fmt.Errorf("%s: %+v", n, c)
			}
		}
		return true, nil
	})
	testenv.Eventually(t, time.Minute, "ops str finished", func() (bool, error) {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "str", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		t.Logf("ops str after the stream was deleted: %+v", o.Status)
		done := o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsCompleted || o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsFailed
		return done && o.Status.UpdatingReplicas == 0, fmt.Errorf("status %+v", o.Status)
	})
}

// A direct CheckpointRestore (the sandbox's own upgradePolicy) whose template
// changes an image is refused as an ops's patch is (a checkpoint cannot be
// restored onto a new image): CheckpointFailed, no checkpoint, the pod
// untouched. Switching the policy to Recreate then upgrades it.
func TestDirectCheckpointRestoreRefusesANewImage(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "dcr", 1, "dcr-pool", func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeCheckpointRestore}
	})
	before, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "dcr-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, "", "patch", "sandbox", "dcr-00", "-n", ns, "--type=merge", "-p",
		`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v2"}]}}}}`)
	testenv.Eventually(t, 2*time.Minute, "the direct CheckpointRestore refused", func() (bool, error) {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "dcr-00", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		up := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
		ok := up != nil && up.Reason == agentsv1alpha1.UpgradingReasonCheckpointFailed && strings.Contains(up.Message, "cannot restore a checkpoint onto a new image")
		return ok, fmt.Errorf("upgrading %+v", up)
	})
	pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, "dcr-00", metav1.GetOptions{})
	if err != nil || pod.UID != before.UID {
		t.Fatalf("pod after the refusal: %v, %v; want the same pod %s", pod.UID, err, before.UID)
	}
	cps, err := s.agents.AgentsV1alpha1().Checkpoints(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(cps.Items) != 0 {
		t.Fatalf("checkpoints after the refusal: %d, %v; want none", len(cps.Items), err)
	}

	kubectl(t, "", "patch", "sandbox", "dcr-00", "-n", ns, "--type=merge", "-p", `{"spec":{"upgradePolicy":{"type":"Recreate"}}}`)
	waitDirectUpgraded(t, s, ns, "dcr-00", "my-registry/sandbox-image:v2")
}

// A misspelt container name in the patch ("sandbx" for "sandbox", only an
// image) pauses the ops before its first sandbox: no pod is touched, and the
// ops says why and the two ways on (Progressing MisspeltContainer, a Warning
// Event). Before, every pod was recreated with an extra container while the
// real one kept its old image, and the warning came after the ops Completed.
func TestMisspeltContainerTouchesNoSandbox(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "typo", 2, "typo-pool", nil)
	before := podUIDs(t, s, ns, names)
	kubectl(t, opsWithPatch("typo", "typo-pool", "2", "    spec:\n      containers:\n      - name: sandbx\n        image: my-registry/sandbox-image:v2\n"), "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, 45*time.Second, "ops typo paused with Progressing MisspeltContainer", func() (bool, error) {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "typo", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(o.Status.Conditions, agentsv1alpha1.ConditionProgressing)
		return o.Spec.Paused && c != nil && c.Reason == "MisspeltContainer" && strings.Contains(c.Message, "containers/sandbx (1 edit from containers/sandbox)"),
			fmt.Errorf("paused %v, Progressing %+v", o.Spec.Paused, c)
	})
	testenv.Eventually(t, 20*time.Second, "a Warning Event MisspeltContainer", func() (bool, error) {
		list, err := s.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=typo,reason=MisspeltContainer,type=Warning"})
		return err == nil && len(list.Items) > 0, err
	})
	assertUntouched(t, s, ns, before)
}
