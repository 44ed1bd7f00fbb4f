package selector

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
)

// A selector that starts again (or whose request statusagg has not recorded
// for a while) requests again only the attempts that did not go on: one whose
// preUpgrade already failed, with statusagg down so the status does not say
// so, is not requested again (its stages would run once more: the failed hook
// again, and the pod replaced behind the failure statusagg records later);
// one the stream holds nothing of after `requested` is. The selector reads
// the stream as its own NATS user (deploy/nats/auth.conf).
func TestDoesNotRequestAgainAnAttemptThatWentOn(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.sandbox("sbx-1", oldImage, agentsv1alpha1.SandboxRunning, nil)
	ops := f.ops("upgrade", 2, newImage, nil)
	// A selector claimed both and stopped; sbx-0's attempt went on and
	// failed in PreUpgrade, which statusagg (down) has not recorded.
	for _, name := range []string{"sbx-0", "sbx-1"} {
		sb := f.getSandbox(name)
		sb.Labels[agentsv1alpha1.LabelUpdateOps] = "upgrade"
		if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Update(ctx, sb, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("label %s: %v", name, err)
		}
	}
	js, err := jetstream.New(testenv.Get(t).NATSConnect(t, "", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	hookrunner, err := events.NewPublisher(js, "hookrunner", nil)
	if err != nil {
		t.Fatal(err)
	}
	sb0 := f.getSandbox("sbx-0")
	if err := hookrunner.Publish(ctx, events.Event{Type: events.TypeFailed, Data: events.Data{
		Ops:     events.OpsRef{Name: ops.Name, UID: ops.UID},
		Sandbox: events.SandboxRef{Namespace: f.ns, Name: "sbx-0", UID: sb0.UID}, Attempt: string(ops.UID),
		Stage: agentsv1alpha1.UpgradingReasonPreUpgrade, Reason: agentsv1alpha1.UpgradingReasonPreUpgradeFailed,
		Message: "hook failed with exit code 1",
	}}); err != nil {
		t.Fatal(err)
	}

	f.startSelector()
	testenv.Eventually(t, 30*time.Second, "requested again for sbx-1", func() (bool, error) {
		got, err := f.events.sandboxes()
		return err == nil && slices.Contains(got, "sbx-1"), fmt.Errorf("requested %v, err %v", got, err)
	})
	testenv.Consistently(t, quiet, "sbx-0 not requested again", func() (bool, error) {
		got, err := f.events.sandboxes()
		return err == nil && !slices.Contains(got, "sbx-0"), fmt.Errorf("requested %v, err %v", got, err)
	})
}
