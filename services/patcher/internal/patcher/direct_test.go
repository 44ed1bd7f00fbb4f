package patcher

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// A direct upgrade whose sandbox lost its pod after the request, and got a
// new one from the new template before the patcher read it, fails PreUpgrade
// at once: preUpgrade never backs that empty pod up over the last backup. A
// sandbox whose pod still runs the old template goes on to preUpgrade.
func TestDirectUpgradeOfAPodRebuiltSinceItsRequestFails(t *testing.T) {
	startPatcher(t)
	ns := testenv.Get(t).Namespace(t)
	rebuilt := directSandboxWithPod(t, ns, "rebuilt", true)
	kept := directSandboxWithPod(t, ns, "kept", false)
	out := subscribe(t, ns)
	publishDirect(t, rebuilt)
	publishDirect(t, kept)
	got := oneEach(t, out, 2)
	if ev := got["rebuilt"]; ev.Type != events.TypeFailed || ev.Data.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed || !strings.Contains(ev.Data.Message, "preUpgrade was not run") {
		t.Errorf("rebuilt: %s %s %q, want PreUpgradeFailed saying preUpgrade was not run", ev.Type, ev.Data.Reason, ev.Data.Message)
	}
	if ev := got["kept"]; ev.Type != events.TypePatched {
		t.Errorf("kept: %s %q, want patched (on to preUpgrade)", ev.Type, ev.Data.Message)
	}
}

// A direct upgrade of a sandbox with a preUpgrade whose pod was deleted
// before the patcher read it fails PreUpgrade: there is nothing to back up,
// and going on would let postUpgrade restore an older backup over what the
// volumes hold (as an ops's attempt does). Without a preUpgrade it goes on.
// Before, both went on.
func TestDirectUpgradeWithoutAPodToBackUpFails(t *testing.T) {
	startPatcher(t)
	ns := testenv.Get(t).Namespace(t)
	hooked := directSandbox(t, ns, "hooked", &agentsv1alpha1.SandboxLifecycle{
		PreUpgrade:  &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"true"}}},
		PostUpgrade: &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"true"}}},
	})
	bare := directSandbox(t, ns, "bare", nil)
	out := subscribe(t, ns)
	publishDirect(t, hooked)
	publishDirect(t, bare)
	got := oneEach(t, out, 2)
	if ev := got["hooked"]; ev.Type != events.TypeFailed || ev.Data.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed || !strings.Contains(ev.Data.Message, "has no pod") {
		t.Errorf("hooked: %s %s %q, want PreUpgradeFailed saying it has no pod to back up", ev.Type, ev.Data.Reason, ev.Data.Message)
	}
	if ev := got["bare"]; ev.Type != events.TypePatched {
		t.Errorf("bare: %s %q, want patched (nothing to back up)", ev.Type, ev.Data.Message)
	}
}

// Only a request's first delivery fails for the missing pod: a redelivery or
// a re-drive may come after an earlier delivery passed the sandbox on and
// podcycler deleted its pod, and its failure could end that attempt.
func TestDirectWithoutPodOnlyOnTheFirstDelivery(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns"}}
	sb.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{}}
	d := events.Data{Attempt: upgrade.DirectAttemptPrefix + "rev-3"}
	if _, ok := upgrade.DirectAttemptGeneration(d.Attempt); !ok {
		t.Fatalf("%q is not a direct attempt id", d.Attempt)
	}
	if why := directWithoutPod(sb, nil, d, true); why == "" {
		t.Error("first delivery, no pod: want the failure")
	}
	if why := directWithoutPod(sb, nil, d, false); why != "" {
		t.Errorf("redelivery: %q, want none", why)
	}
	redriven := d
	redriven.Redrive = 1
	if why := directWithoutPod(sb, nil, redriven, true); why != "" {
		t.Errorf("re-drive: %q, want none", why)
	}
}

// oneEach returns the first event of each of n sandboxes from out, by
// sandbox name, within 30s.
func oneEach(t *testing.T, out <-chan events.Event, n int) map[string]events.Event {
	t.Helper()
	got := map[string]events.Event{}
	deadline := time.After(30 * time.Second)
	for len(got) < n {
		select {
		case ev := <-out:
			if _, seen := got[ev.Data.Sandbox.Name]; !seen {
				got[ev.Data.Sandbox.Name] = ev
			}
		case <-deadline:
			t.Fatalf("events within 30s: %v, want one for each of %d sandboxes", got, n)
		}
	}
	return got
}

// directSandbox creates a sandbox with spec.upgradePolicy and lifecycle, and no pod.
func directSandbox(t *testing.T, ns, name string, lifecycle *agentsv1alpha1.SandboxLifecycle) *agentsv1alpha1.Sandbox {
	t.Helper()
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "registry.example/sandbox:v2"}}}}
	sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
	sb.Spec.Lifecycle = lifecycle
	sb, err := client(t).AgentsV1alpha1().Sandboxes(ns).Create(context.Background(), sb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// directSandboxWithPod creates a sandbox with spec.upgradePolicy and its pod,
// built from its template when rebuilt, from an older one otherwise.
func directSandboxWithPod(t *testing.T, ns, name string, rebuilt bool) *agentsv1alpha1.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb := directSandbox(t, ns, name, nil)
	var err error
	hash := "older"
	if rebuilt {
		if hash, err = upgrade.Revision(sb.Spec.Template); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels:          map[string]string{agentsv1alpha1.LabelPodTemplateHash: hash},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox"))}}}
	pod.Spec = sb.Spec.Template.Spec
	if _, err := testenv.Get(t).Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return sb
}

// subscribe returns the failed and patched events of namespace ns.
func subscribe(t *testing.T, ns string) <-chan events.Event {
	t.Helper()
	nc := testenv.Get(t).NATSConnect(t, "", "admin")
	out := make(chan events.Event, 16)
	for _, token := range []string{events.TokenFailed, events.TokenPatched} {
		sub, err := nc.Subscribe(events.SubjectPrefix+"."+events.EncodeToken(ns)+".*."+token, func(m *nats.Msg) {
			ev, err := events.Decode(m.Data)
			if err != nil {
				t.Errorf("decode event on %s: %v", m.Subject, err)
				return
			}
			out <- ev
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return out
}

// publishDirect publishes the selector's requested of sb's direct attempt.
func publishDirect(t *testing.T, sb *agentsv1alpha1.Sandbox) {
	t.Helper()
	js, err := jetstream.New(testenv.Get(t).NATSConnect(t, "", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(context.Background(), js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js, "selector", nil)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	ev := events.Event{Type: events.TypeRequested, Data: events.Data{
		Sandbox: events.SandboxRef{Namespace: sb.Namespace, Name: sb.Name, UID: sb.UID},
		Attempt: upgrade.DirectAttempt(rev, sb.Generation),

		SandboxResourceVersion: sb.ResourceVersion,
	}}
	if err := pub.Publish(context.Background(), ev); err != nil {
		t.Fatalf("publish requested: %v", err)
	}
}

// A direct upgrade whose hooks' pin the API server refuses for good (here a
// policy on molt.dev/ annotation writes) fails PreUpgrade at once, naming the
// annotation, the policy's words and the way on; the pod is not touched.
// Before, each redelivery was refused alike, and the watchdog failed the
// sandbox minutes later, blaming the patcher.
func TestRefusedDirectHooksPinFailsAtOnce(t *testing.T) {
	startPatcher(t)
	ns := testenv.Get(t).Namespace(t)
	const words = "annotation molt.dev/attempt-hooks is not allowed here"
	sb := directSandboxWithPod(t, ns, "pinned", false)
	testenv.Get(t).Refuse(t, ns, testenv.Refusal{
		Group: agentsv1alpha1.SchemeGroupVersion.Group, Resource: "sandboxes",
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Allow:      fmt.Sprintf("!has(object.metadata.annotations) || !('%s' in object.metadata.annotations)", upgrade.AnnotationAttemptHooks),
		Message:    words,
	}, func(ctx context.Context) error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"probe"}}}`, upgrade.AnnotationAttemptHooks)
		_, err := client(t).AgentsV1alpha1().Sandboxes(ns).Patch(ctx, sb.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	out := subscribe(t, ns)
	start := time.Now()
	publishDirect(t, sb)
	ev := oneEach(t, out, 1)["pinned"]
	t.Logf("%s after %s: %s", ev.Type, time.Since(start).Round(time.Millisecond), ev.Data.Message)
	if ev.Type != events.TypeFailed || ev.Data.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed {
		t.Fatalf("%s %s, want failed PreUpgradeFailed", ev.Type, ev.Data.Reason)
	}
	for _, want := range []string{upgrade.AnnotationAttemptHooks, words, "the pod keeps running", "then change spec.template again"} {
		if !strings.Contains(ev.Data.Message, want) {
			t.Errorf("message %q lacks %q", ev.Data.Message, want)
		}
	}
	pods, err := testenv.Get(t).Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].DeletionTimestamp != nil {
		t.Errorf("pods after the refused pin: %d, want the old one untouched", len(pods.Items))
	}
}
