package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

func opsYAML(name, pool, maxUnavailable, image string) string {
	return fmt.Sprintf(`apiVersion: agents.kruise.io/v1alpha1
kind: SandboxUpdateOps
metadata:
  name: %s
spec:
  selector:
    matchLabels:
      %s: %s
  updateStrategy:
    maxUnavailable: %s
  patch:
    spec:
      containers:
      - name: sandbox
        image: %s
`, name, poolLabel, pool, maxUnavailable, image)
}

func TestPercentMaxUnavailable(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "pct", 20, "pct-pool", nil)
	w := watch(t, s, ns)
	kubectl(t, opsYAML("pct", "pct-pool", "10%", "my-registry/sandbox-image:v2"), "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "pct", agentsv1alpha1.SandboxUpdateOpsCompleted, 4*time.Minute)
	if ops.Status.UpdatedReplicas != 20 {
		t.Fatalf("updatedReplicas = %d, want 20", ops.Status.UpdatedReplicas)
	}
	if maxUp, _, _ := w.snapshot(); maxUp > 2 {
		t.Fatalf("10%% of 20 is 2, but %d sandboxes were upgrading at once", maxUp)
	}
}

// TestBadImageFailsTheOps: the bad image fails its sandbox with the
// container's reason, the budget stops the rollout, and the ops ends Failed.
func TestBadImageFailsTheOps(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "bad", 4, "bad-pool", nil)
	w := watch(t, s, ns)
	kubectl(t, opsYAML("bad", "bad-pool", "1", "my-registry/sandbox-image:non-existent"), "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "bad", agentsv1alpha1.SandboxUpdateOpsFailed, 3*time.Minute)
	if ops.Status.FailedReplicas != 1 || ops.Status.UpdatedReplicas != 0 || ops.Status.Replicas != 4 {
		t.Fatalf("status = %+v, want 4 total, 0 updated, 1 failed", ops.Status)
	}
	cond := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionFailureBudgetExhausted)
	if cond == nil || !strings.Contains(cond.Message, "bad-00") {
		t.Fatalf("FailureBudgetExhausted condition = %+v, want one naming bad-00", cond)
	}
	sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "bad-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	up := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
	if up == nil || up.Reason != agentsv1alpha1.UpgradingReasonUpgradePodFailed || !strings.Contains(up.Message, "container sandbox:") ||
		!(strings.Contains(up.Message, "ImagePullBackOff") || strings.Contains(up.Message, "ErrImagePull")) {
		t.Fatalf("bad-00 Upgrading = %+v, want UpgradePodFailed naming the container and its pull error", up)
	}
	if _, saw, _ := w.snapshot(); saw["bad-01"] || saw["bad-02"] {
		t.Fatalf("sandboxes beyond the failure budget started: %v", saw)
	}
}

// TestSecondOpsWaitsForTheFirst: a second ops in the namespace waits in
// Pending with a condition and starts by itself when the first ends.
func TestSecondOpsWaitsForTheFirst(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "two", 3, "two-pool", nil)
	kubectl(t, opsYAML("first", "two-pool", "1", "my-registry/sandbox-image:v2"), "apply", "-n", ns, "-f", "-")
	kubectl(t, opsYAML("second", "two-pool", "1", "my-registry/sandbox-image:v3"), "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, 30*time.Second, "second ops Pending and waiting", func() (bool, error) {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(context.Background(), "second", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(o.Status.Conditions, agentsv1alpha1.ConditionWaitingForNamespace)
		return o.Status.Phase == agentsv1alpha1.SandboxUpdateOpsPending && c != nil && strings.Contains(c.Message, "first"), fmt.Errorf("%+v", o.Status)
	})
	waitOps(t, s, ns, "first", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	second := waitOps(t, s, ns, "second", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if second.Status.UpdatedReplicas != 3 {
		t.Fatalf("second ops updated %d, want 3", second.Status.UpdatedReplicas)
	}
}

// TestPauseAndDelete: paused admits nothing new, unpausing resumes;
// deleting an ops removes its labels and releases its finalizer.
func TestPauseAndDelete(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	makeSandboxes(t, s, ns, "pz", 4, "pz-pool", nil)
	kubectl(t, opsYAML("pz", "pz-pool", "1", "my-registry/sandbox-image:v2"), "apply", "-n", ns, "-f", "-")
	labelled := func() int {
		list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelUpdateOps + "=pz"})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	// Pause as soon as the first sandbox is claimed: the ops status's
	// updated count is coalesced (about a second behind), and at
	// maxUnavailable 1 a fast stack finishes all four within that second.
	testenv.Eventually(t, time.Minute, "first sandbox claimed", func() (bool, error) {
		return labelled() >= 1, nil
	})
	kubectl(t, "", "patch", "suo", "pz", "-n", ns, "--type=merge", "-p", `{"spec":{"paused":true}}`)
	// Whatever was in flight finishes; then nothing new starts.
	var settled int32
	testenv.Eventually(t, time.Minute, "in-flight sandboxes finish", func() (bool, error) {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "pz", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		settled = o.Status.UpdatedReplicas
		return o.Status.UpdatingReplicas == 0 && o.Status.UpdatedReplicas >= 1, fmt.Errorf("%+v", o.Status)
	})
	before := labelled()
	// Give the selector several reconcile rounds; none may admit.
	testenv.Consistently(t, 3*time.Second, "paused ops admits nothing", func() (bool, error) {
		n := labelled()
		return n == before, fmt.Errorf("%d -> %d sandboxes claimed", before, n)
	})
	if settled >= 4 {
		t.Fatalf("all sandboxes updated before the pause took effect; the test proves nothing")
	}
	kubectl(t, "", "patch", "suo", "pz", "-n", ns, "--type=merge", "-p", `{"spec":{"paused":false}}`)
	waitOps(t, s, ns, "pz", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)

	kubectl(t, "", "delete", "suo", "pz", "-n", ns, "--wait=true", "--timeout=60s")
	if n := labelled(); n != 0 {
		t.Fatalf("%d sandboxes still carry the deleted ops's label", n)
	}
}

// TestOpsAppliedWithItsSandboxes: a Sandbox and the ops that upgrades it in
// one `kubectl apply` (a GitOps sync, a directory of manifests): the ops sees
// the sandbox before it runs (no phase yet, then Pending), and waits for it
// (SandboxesStarting) instead of completing at once with nothing selected;
// once the sandbox runs, the ops upgrades it.
func TestOpsAppliedWithItsSandboxes(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	manifest := fmt.Sprintf(`apiVersion: agents.kruise.io/v1alpha1
kind: Sandbox
metadata:
  name: tg-00
  labels:
    %s: tg-pool
spec:
  template:
    spec:
      containers:
      - name: sandbox
        image: my-registry/sandbox-image:v1
---
`, poolLabel) + opsYAML("tg", "tg-pool", "1", "my-registry/sandbox-image:v2")
	kubectl(t, manifest, "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "tg", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if ops.Status.Replicas != 1 || ops.Status.UpdatedReplicas != 1 {
		c := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionProgressing)
		t.Fatalf("ops applied with its sandbox: %d of %d updated (%+v), want 1 of 1", ops.Status.UpdatedReplicas, ops.Status.Replicas, c)
	}
	sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, "tg-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := sb.Spec.Template.Spec.Containers[0].Image; img != "my-registry/sandbox-image:v2" {
		t.Errorf("tg-00 template image %s, want v2", img)
	}
}

// An ops created under the name of an earlier one whose claims were never
// released (it was deleted with its finalizer removed by hand while no
// selector ran: the README's way out) does not take those claims for its
// own: it admits the sandboxes maxUnavailable at a time and upgrades them,
// instead of requesting them all at once for stages that skip them as
// another attempt's.
func TestOpsOfTheSameNameAsAnUnreleasedOne(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "same", 3, "same-pool", nil)
	kubectl(t, opsYAML("same", "same-pool", "3", "my-registry/sandbox-image:v2"), "apply", "-n", ns, "-f", "-")
	old := waitOps(t, s, ns, "same", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	kubectl(t, "", "delete", "suo", "same", "-n", ns, "--wait=true", "--timeout=60s")
	// What the unreleased claims look like: the label and the claim of
	// the deleted ops's uid.
	for _, n := range names {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"same"},"annotations":{"molt.dev/claim":"same %s"}}}`, agentsv1alpha1.LabelUpdateOps, old.UID)
		kubectl(t, "", "patch", "sbx", n, "-n", ns, "--type=merge", "-p", patch)
	}
	w := watch(t, s, ns)
	kubectl(t, hookOps("same", "same-pool", "my-registry/sandbox-image:v3", "sleep 2", "", 30), "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "same", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if ops.UID == old.UID || ops.Status.UpdatedReplicas != 3 {
		t.Errorf("ops same (uid %s, the deleted one's %s): %d updated, want 3", ops.UID, old.UID, ops.Status.UpdatedReplicas)
	}
	if maxUp, _, _ := w.snapshot(); maxUp > 1 {
		t.Errorf("maxUnavailable is 1, but %d sandboxes were upgrading at once", maxUp)
	}
	for _, n := range names {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img := sb.Spec.Template.Spec.Containers[0].Image; img != "my-registry/sandbox-image:v3" {
			t.Errorf("%s runs %s, want v3", n, img)
		}
	}
}
