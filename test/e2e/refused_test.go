package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// An admission policy of the cluster (here a ValidatingAdmissionPolicy; a
// Kyverno or Gatekeeper policy answers the same way) that refuses the
// patched template fails the sandbox in PreUpgrade within seconds, with the
// policy's words on its Upgrading condition; its pod is untouched. Before,
// the patcher left the refusal to redeliveries minutes apart and the
// watchdog failed the sandbox after its deadline with a message that did not
// say why.
func TestAdmissionPolicyRefusingThePatchFailsPreUpgradeAtOnce(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "refused", 1, "refused-pool", nil)
	before := podUIDs(t, s, ns, names)
	const denied, words = "my-registry/sandbox-image:denied", "image my-registry/sandbox-image:denied is not allowed in this namespace"
	s.env.Refuse(t, ns, testenv.Refusal{
		Group: agentsv1alpha1.SchemeGroupVersion.Group, Resource: "sandboxes",
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Allow:      fmt.Sprintf("!has(object.spec.template) || object.spec.template.spec.containers.all(c, c.image != '%s')", denied),
		Message:    words,
	}, func(ctx context.Context) error {
		patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":%q}]}}}}`, denied)
		_, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, names[0], types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})

	start := time.Now()
	kubectl(t, opsWithPatch("up", "refused-pool", "1", "    spec:\n      containers:\n      - name: sandbox\n        image: "+denied+"\n"), "apply", "-n", ns, "-f", "-")
	var message string
	testenv.Eventually(t, 45*time.Second, "sandbox "+names[0]+" PreUpgradeFailed", func() (bool, error) {
		sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), names[0], metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
		if c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed {
			return false, fmt.Errorf("Upgrading condition %+v", c)
		}
		message = c.Message
		return true, nil
	})
	t.Logf("PreUpgradeFailed after %s: %s", time.Since(start).Round(time.Second), message)
	for _, want := range []string{"the API server refused the patched template of sandbox " + ns + "/" + names[0], words, "create a new SandboxUpdateOps"} {
		if !strings.Contains(message, want) {
			t.Errorf("message %q lacks %q", message, want)
		}
	}
	if after := podUIDs(t, s, ns, names); after[names[0]] != before[names[0]] {
		t.Errorf("pod replaced (%s -> %s), want untouched", before[names[0]], after[names[0]])
	}
	sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), names[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if image := sb.Spec.Template.Spec.Containers[0].Image; image != "my-registry/sandbox-image:v1" {
		t.Errorf("template image %s, want my-registry/sandbox-image:v1 unchanged", image)
	}
	waitOps(t, s, ns, "up", agentsv1alpha1.SandboxUpdateOpsFailed, 30*time.Second)
}

// A pause whose pod delete an admission policy refuses: the sandbox stays
// Running with its pod, and says why where a user looks (SandboxPaused=False
// PodDeleteRefused, the MESSAGE column, a Warning Event), in the policy's
// words; unpaused, it says NotPaused again and the message goes.
func TestRefusedPauseSaysWhy(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "nopause", 1, "nopause-pool", nil)
	before := podUIDs(t, s, ns, names)
	const words = "sandbox pods in this namespace may not be deleted"
	s.env.Refuse(t, ns, testenv.Refusal{
		Resource:   "pods",
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
		Allow:      "false", Message: words,
	}, func(ctx context.Context) error {
		return s.env.Kube.CoreV1().Pods(ns).Delete(ctx, names[0], metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	})
	pausePatch := func(paused bool) {
		t.Helper()
		body := fmt.Sprintf(`{"spec":{"paused":%t}}`, paused)
		if _, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, names[0], types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pausePatch(true)
	var sb *agentsv1alpha1.Sandbox
	testenv.Eventually(t, 45*time.Second, names[0]+" SandboxPaused=False PodDeleteRefused", func() (bool, error) {
		var err error
		if sb, err = s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, names[0], metav1.GetOptions{}); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionSandboxPaused)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "PodDeleteRefused", fmt.Errorf("SandboxPaused %+v", c)
	})
	if sb.Status.Phase != agentsv1alpha1.SandboxRunning || !strings.Contains(sb.Status.Message, words) || !strings.Contains(sb.Status.Message, "or unpause the sandbox") {
		t.Errorf("phase %s, message %q: want Running, with the policy's words and what to do", sb.Status.Phase, sb.Status.Message)
	}
	if after := podUIDs(t, s, ns, names); after[names[0]] != before[names[0]] {
		t.Errorf("pod %s, want the same pod %s", after[names[0]], before[names[0]])
	}
	testenv.Eventually(t, 20*time.Second, "a Warning Event PodDeleteRefused", func() (bool, error) {
		list, err := s.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + names[0] + ",reason=PodDeleteRefused,type=Warning"})
		return err == nil && len(list.Items) > 0 && strings.Contains(list.Items[0].Message, words), err
	})

	pausePatch(false)
	testenv.Eventually(t, 45*time.Second, names[0]+" NotPaused, no message", func() (bool, error) {
		got, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, names[0], metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, agentsv1alpha1.ConditionSandboxPaused)
		return c != nil && c.Reason == "NotPaused" && got.Status.Message == "", fmt.Errorf("SandboxPaused %+v, message %q", c, got.Status.Message)
	})
}
