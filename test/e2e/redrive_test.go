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

// TestLostPrehookDoneIsRedriven: a sandbox's prehook-done is lost (deleted
// from the stream while podcycler is down, after statusagg recorded
// UpgradePod). statusagg's watchdog re-drives the stage on its own subject
// (redrive-prehook-done: its NATS user may publish no prehook-done), and
// podcycler takes the re-drive through its consumer as the prehook-done it
// stands for: the pod is replaced once, the ops completes, and the sandbox's
// StageStalled Event says what was published.
func TestLostPrehookDoneIsRedriven(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test: skipped with -short")
	}
	ctx := context.Background()
	s := OwnStack(t, stackOptions{})
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "rd", 1, "rd-pool", nil)
	name := names[0]
	before := podUIDs(t, s, ns, names)[name]

	s.Kill9(t, "podcycler")
	const image = "my-registry/sandbox-image:v2"
	kubectl(t, opsYAML("rd", "rd-pool", "1", image), "apply", "-n", ns, "-f", "-")
	testenv.Eventually(t, time.Minute, name+" in UpgradePod", func() (bool, error) {
		c := upgradingCondition(t, s, ns, name)
		return c != nil && c.Reason == agentsv1alpha1.UpgradingReasonUpgradePod, fmt.Errorf("Upgrading %+v", c)
	})

	js, err := jetstream.New(s.env.NATSConnect(t, "", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	subject := events.SandboxSubject(ns, name, events.TokenPreHookDone)
	msg, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("the prehook-done of %s: %v", name, err)
	}
	if err := stream.DeleteMsg(ctx, msg.Sequence); err != nil {
		t.Fatalf("delete the prehook-done of %s (sequence %d): %v", name, msg.Sequence, err)
	}
	t.Logf("deleted the prehook-done of %s (sequence %d) before podcycler took it", name, msg.Sequence)
	s.Restart(t, "podcycler")

	ops := waitEnded(t, s, ns, "rd", 3*time.Minute)
	if ops.Status.Phase != agentsv1alpha1.SandboxUpdateOpsCompleted {
		t.Fatalf("ops rd %s (Upgrading of %s: %+v), want Completed", ops.Status.Phase, name, upgradingCondition(t, s, ns, name))
	}
	if got := storedOn(t, s.env, events.SandboxSubject(ns, name, events.TokenRedrivePreHookDone)); got < 1 {
		t.Errorf("%d messages on %s's redrive-prehook-done subject, want the watchdog's re-drive", got, name)
	}
	if got := storedOn(t, s.env, subject); got != 0 {
		t.Errorf("%d prehook-done messages of %s after the delete, want none: the re-drive must not publish the input's subject", got, name)
	}
	pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(pod.UID) == before || pod.Spec.Containers[0].Image != image {
		t.Errorf("pod of %s: uid %s (was %s), image %s; want a new pod of %s", name, pod.UID, before, pod.Spec.Containers[0].Image, image)
	}
	evs, err := s.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=StageStalled"})
	if err != nil {
		t.Fatal(err)
	}
	if !hasEventSaying(evs.Items, events.TypeRedrivePreHookDone) {
		t.Errorf("no StageStalled Event of %s names %s: %+v", name, events.TypeRedrivePreHookDone, evs.Items)
	}
}

// hasEventSaying reports whether one of evs has words in its message.
func hasEventSaying(evs []corev1.Event, words string) bool {
	for _, e := range evs {
		if strings.Contains(e.Message, words) {
			return true
		}
	}
	return false
}

// TestStoppedServiceIsToldOnTheOps: with hookrunner stopped, a sandbox's
// patched waits at hookrunner's consumer past PreUpgrade's deadline
// (undelivered, or handed to the dead process and re-driven). The ops says so (StagesStalled, naming the sandbox, the consumer
// and hookrunner; a Warning Event of that name; `kubectl molt status` shows
// it), where a walk saw an ordinary Updating line for over a minute. Once
// hookrunner is back the ops completes and the condition is gone.
func TestStoppedServiceIsToldOnTheOps(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test: skipped with -short")
	}
	ctx := context.Background()
	s := OwnStack(t, stackOptions{})
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "st", 1, "st-pool", nil)

	s.Kill9(t, "hookrunner")
	kubectl(t, hookOps("st", "st-pool", "my-registry/sandbox-image:v2", "true", "", 10), "apply", "-n", ns, "-f", "-")
	var said string
	testenv.Eventually(t, 2*time.Minute, "ops st StagesStalled", func() (bool, error) {
		ops, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, "st", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionStagesStalled)
		if c == nil || c.Status != metav1.ConditionTrue {
			return false, fmt.Errorf("phase %s, StagesStalled %+v", ops.Status.Phase, c)
		}
		said = c.Message
		return true, nil
	})
	// Its patched waits undelivered at hookrunner's consumer; or, when the
	// server handed it to the killed process's pull request before that
	// expired, it counts as delivered and unanswered and is re-driven (the
	// patcher then passes it on to hookrunner again). Either way the ops names
	// the sandbox, its stage and hookrunner.
	queued := strings.Contains(said, names[0]+" in PreUpgrade (its input not yet delivered by consumer hookrunner)") &&
		strings.Contains(said, "Check that hookrunner runs and reaches NATS")
	redriven := strings.Contains(said, names[0]+" in PreUpgrade (re-driven ") &&
		strings.Contains(said, "Check that hookrunner and patcher run and reach NATS")
	if !queued && !redriven {
		t.Errorf("StagesStalled says %q; want it to name %s in PreUpgrade, waiting at consumer hookrunner or re-driven, and hookrunner to check", said, names[0])
	}
	if out, errOut, _ := molt(t, "", "status", "st", "-n", ns); !strings.Contains(out, "StagesStalled") || !strings.Contains(out, names[0]) {
		t.Errorf("kubectl molt status does not show StagesStalled:\n%s%s", out, errOut)
	}

	s.Restart(t, "hookrunner")
	ops := waitEnded(t, s, ns, "st", 3*time.Minute)
	if ops.Status.Phase != agentsv1alpha1.SandboxUpdateOpsCompleted {
		t.Fatalf("ops st %s, want Completed once hookrunner is back", ops.Status.Phase)
	}
	if c := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionStagesStalled); c != nil {
		t.Errorf("StagesStalled %+v on the Completed ops, want none", c)
	}
	evs, err := s.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=st,reason=" + agentsv1alpha1.ConditionStagesStalled})
	if err != nil {
		t.Fatal(err)
	}
	if !hasEventSaying(evs.Items, names[0]+" in PreUpgrade") {
		t.Errorf("no Warning Event StagesStalled on ops st naming %s: %+v", names[0], evs.Items)
	}
}
