package selector

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// A template edited again before statusagg recorded the direct attempt the
// first edit started waits: the status alone does not show that attempt in
// progress, and a second one beside it would back up and replace the same
// pod at once. Once the status shows it the memory no longer holds anything
// back; after directRecordWait it names the attempt for the stream to judge
// (requestHandled: held back further only if that attempt went on).
func TestDirectWaitsForTheAttemptItRequestedToBeRecorded(t *testing.T) {
	d := &direct{}
	now := time.Now()
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{UID: "sb-1"}}
	const key, first, second = "ns/sbx", "direct-r5-5", "direct-r6-6"

	if prev, wait := d.unrecorded(key, sb, first, now); wait != 0 || prev != "" {
		t.Fatalf("nothing requested yet: %q, %s", prev, wait)
	}
	d.requested(key, sb, first, now)
	if prev, wait := d.unrecorded(key, sb, second, now.Add(time.Second)); prev != first || wait <= 0 || wait > directRecordWait {
		t.Errorf("the next edit before the first attempt is recorded: %q, %s; want to wait for %s", prev, wait, first)
	}
	if _, wait := d.unrecorded(key, sb, first, now.Add(time.Second)); wait != 0 {
		t.Errorf("the same attempt again (a republish) waits %s", wait)
	}

	recorded := sb.DeepCopy()
	recorded.Status.Conditions = []metav1.Condition{{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: first}}
	if _, wait := d.unrecorded(key, recorded, second, now.Add(time.Second)); wait != 0 {
		t.Errorf("once the status shows the first attempt, the memory waits %s (the status decides)", wait)
	}

	d.requested(key, sb, first, now)
	if prev, wait := d.unrecorded(key, sb, second, now.Add(directRecordWait)); wait != 0 || prev != first {
		t.Errorf("after directRecordWait: %q, %s; want %q with no wait left on the memory (the stream decides)", prev, wait, first)
	}
	// The status showed an ops's attempt when the direct one was asked for:
	// still showing it, the direct attempt is not recorded yet.
	shownBefore := sb.DeepCopy()
	shownBefore.Status.Conditions = []metav1.Condition{{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: "ops-before"}}
	d.requested(key, shownBefore, first, now)
	if prev, wait := d.unrecorded(key, shownBefore, second, now.Add(time.Second)); prev != first || wait <= 0 {
		t.Errorf("the status shows the ops's attempt it showed at the request: %q, %s; want %s held", prev, wait, first)
	}
	d.requested(key, sb, first, now)
	byOps := sb.DeepCopy()
	byOps.Status.Conditions = []metav1.Condition{{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: "ops-uid"}}
	if prev, wait := d.unrecorded(key, byOps, second, now.Add(time.Second)); prev != "" || wait != 0 {
		t.Errorf("the status shows an ops's attempt since (the first one was recorded and ended between two looks): %q, %s; want nothing held back", prev, wait)
	}
	d.requested(key, sb, first, now)
	other := sb.DeepCopy()
	other.UID = "sb-2" // deleted and created again
	if _, wait := d.unrecorded(key, other, second, now.Add(time.Second)); wait != 0 {
		t.Errorf("a sandbox created again under the name waits %s for its predecessor's attempt", wait)
	}
}

// TestDirectRequestedIsPublishedAgain: a direct attempt whose status never
// shows it (its requested lost after the publish: the stream deleted, or
// statusagg not there) gets requested again every RepublishAfter, as an
// admitted sandbox does, with nothing else changing; a plain NATS
// subscriber sees each publish, which JetStream keeps once. Without it, the
// template edit would never roll out.
func TestDirectRequestedIsPublishedAgain(t *testing.T) {
	f := newFixture(t)
	env := testenv.Get(t)
	cfg := f.selectorConfig()
	cfg.RepublishAfter = time.Second
	testenv.Background(t, "selector.Run", 20*time.Second, func(ctx context.Context) error { return Run(ctx, cfg) }, nil)

	sb := f.directSandbox("sbx-direct")

	nc := env.NATSConnect(t, "", "admin")
	sub, err := nc.SubscribeSync(events.SandboxSubject(f.ns, sb.Name, events.TokenRequested))
	if err != nil {
		t.Fatal(err)
	}
	f.editImage(sb.Name, newImage)
	var attempts []string
	deadline := time.Now().Add(15 * time.Second)
	for len(attempts) < 3 && time.Now().Before(deadline) {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		ev, err := events.Decode(msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		attempts = append(attempts, ev.Data.Attempt)
	}
	if len(attempts) < 3 {
		t.Fatalf("requested published %d times in 15s with RepublishAfter 1s (%v), want it again while the status does not show the attempt", len(attempts), attempts)
	}
	if attempts[0] != attempts[1] || attempts[1] != attempts[2] || !strings.HasPrefix(attempts[0], DirectAttemptPrefix) {
		t.Errorf("republished attempts %v, want the same direct attempt each time", attempts)
	}
}

// A selector that restarted remembers no direct attempt it requested: one
// the stream holds that statusagg (down) has not recorded holds back the
// next template edit's attempt all the same, until the status shows it
// ended. Without the stream's word, the second attempt would run beside the
// first (two backups, a pod replaced under the other's hook).
func TestDirectWaitsAfterARestartForAnAttemptNotRecordedYet(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sb := f.directSandbox("sbx-direct")
	// The selector before the restart requested an attempt for an earlier
	// edit; its stages went on, statusagg has not read it.
	const earlier = DirectAttemptPrefix + "rev-earlier-2"
	f.publishRequested(sb, earlier)
	f.editImage(sb.Name, newImage)
	f.startSelector()
	requestedOther := func() []string {
		var out []string
		for _, ev := range f.events.all() {
			if ev.Data.Attempt != earlier {
				out = append(out, ev.Data.Attempt)
			}
		}
		return out
	}
	testenv.Consistently(t, quiet, "no second direct attempt while the first is not recorded", func() (bool, error) {
		got := requestedOther()
		return len(got) == 0, fmt.Errorf("requested %v beside %s", got, earlier)
	})

	// statusagg records the earlier attempt, ended: the edit's attempt goes.
	cur := f.getSandbox(sb.Name)
	cur.Status.Conditions = []metav1.Condition{
		{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.UpgradingReasonSucceeded, Message: earlier, LastTransitionTime: metav1.Now()},
		{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: agentsv1alpha1.UpgradingReasonSucceeded, LastTransitionTime: metav1.Now()},
	}
	if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the edit's direct attempt requested once the earlier one is recorded", func() (bool, error) {
		got := requestedOther()
		return len(got) == 1 && strings.HasPrefix(got[0], DirectAttemptPrefix), fmt.Errorf("requested %v", got)
	})
}

// directSandbox creates a sandbox with spec.upgradePolicy running oldImage,
// and the Ready pod podcycler would have built from its template.
func (f *fixture) directSandbox(name string) *agentsv1alpha1.Sandbox {
	t := f.t
	t.Helper()
	ctx := context.Background()
	env := testenv.Get(t)
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}
	sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: oldImage}}}}
	sb, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Create(ctx, sb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	revision, err := upgrade.Revision(sb.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	// The pod podcycler would have built from the template, left to settle
	// (scheduled, Running) so that no pod event looks at the sandbox again.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sb.Name, Namespace: f.ns,
		Labels:          map[string]string{agentsv1alpha1.LabelPodTemplateHash: revision},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox"))}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: oldImage}}}}
	if _, err := env.Kube.CoreV1().Pods(f.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kwok's last write makes it Ready: a pod event the selector's cache
	// shows late after the edit adds at most one sync.
	testenv.Eventually(t, 30*time.Second, "the pod runs and is Ready", func() (bool, error) {
		p, err := env.Kube.CoreV1().Pods(f.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning && upgrade.PodReady(p), fmt.Errorf("phase %s, conditions %v", p.Status.Phase, p.Status.Conditions)
	})
	return sb
}

// editImage sets the image of the sandbox's main container in its template.
func (f *fixture) editImage(name, image string) {
	f.t.Helper()
	edit := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"main","image":"` + image + `"}]}}}}`)
	if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Patch(context.Background(), name, types.MergePatchType, edit, metav1.PatchOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// An ops does not claim a sandbox whose own direct upgrade (spec.upgradePolicy)
// was requested and is not recorded by statusagg yet: its stages may be
// running, and the ops's attempt would back up the pod that upgrade built, or
// run beside it. Select leaves out a direct upgrade only once the status shows
// it; the stream says it before. Once recorded and ended, the ops claims it.
func TestOpsWaitsForADirectUpgradeNotRecordedYet(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sb := f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
	sb, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Update(ctx, sb, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const direct = DirectAttemptPrefix + "rev-edit-2"
	f.publishRequested(sb, direct)
	f.startSelector()
	f.ops("upgrade", 1, newImage, nil)
	f.waitFinalizer("upgrade")
	testenv.Consistently(t, quiet, "sbx-0 not claimed while its direct upgrade is not recorded", func() (bool, error) {
		got, err := f.claimed("upgrade")
		return err == nil && len(got) == 0, fmt.Errorf("claimed %v, err %v", got, err)
	})

	cur := f.getSandbox(sb.Name)
	cur.Status.Conditions = []metav1.Condition{
		{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.UpgradingReasonSucceeded, Message: direct, LastTransitionTime: metav1.Now()},
		{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: agentsv1alpha1.UpgradingReasonSucceeded, LastTransitionTime: metav1.Now()},
	}
	if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitClaimed("upgrade", "sbx-0")
}

// publishRequested stores a `requested` of attempt for sb in the stream, as a
// selector did before (no statusagg consumes it in these tests).
func (f *fixture) publishRequested(sb *agentsv1alpha1.Sandbox, attempt string) {
	t := f.t
	t.Helper()
	js, err := jetstream.New(testenv.Get(t).NATSConnect(t, "", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js, "selector", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), events.Event{Type: events.TypeRequested, Data: events.Data{
		Sandbox: events.SandboxRef{Namespace: f.ns, Name: sb.Name, UID: sb.UID}, Attempt: attempt}}); err != nil {
		t.Fatal(err)
	}
}

// A failed direct upgrade whose template is changed to retry (as its
// message says) is continued even when its pod runs the new template already:
// a pod the failed attempt built (rebuilt from the edited template before the
// selector looked) holds no workspace, and the resume restores the backup
// into it. One whose pod the attempt did not build is not: that pod may be
// the one it started from, with the workspace in it, and a restore could
// write an older backup over it.
func TestDirectRetryStartsOnAPodTheFailedAttemptBuilt(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	env := testenv.Get(t)
	const failed = DirectAttemptPrefix + "rev-failed-2"
	failAt := func(name, reason string, built bool) {
		sb := f.directSandbox(name)
		sb.Status.Phase = agentsv1alpha1.SandboxUpgrading
		sb.Status.Conditions = []metav1.Condition{
			{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: failed, LastTransitionTime: metav1.Now()},
			{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason, LastTransitionTime: metav1.Now()},
		}
		if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).UpdateStatus(ctx, sb, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if built {
			mark := upgrade.AnnotationPatch(upgrade.AnnotationPodAttempt, failed)
			if _, err := env.Kube.CoreV1().Pods(f.ns).Patch(ctx, name, types.MergePatchType, mark, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	failAt("post", agentsv1alpha1.UpgradingReasonPostUpgradeFailed, true)
	failAt("pod", agentsv1alpha1.UpgradingReasonUpgradePodFailed, true)
	failAt("original", agentsv1alpha1.UpgradingReasonUpgradePodFailed, false)
	f.startSelector()
	requested := func(name string) []events.Event {
		var out []events.Event
		for _, ev := range f.events.all() {
			if ev.Data.Sandbox.Name == name {
				out = append(out, ev)
			}
		}
		return out
	}
	for name, reason := range map[string]string{"post": agentsv1alpha1.UpgradingReasonPostUpgradeFailed, "pod": agentsv1alpha1.UpgradingReasonUpgradePodFailed} {
		testenv.Eventually(t, 30*time.Second, name+"'s retry requested, continuing the failed attempt", func() (bool, error) {
			got := requested(name)
			return len(got) == 1 && got[0].Data.ResumedAttempt == failed && got[0].Data.ResumedReason == reason, fmt.Errorf("requested %+v", got)
		})
	}
	testenv.Consistently(t, quiet, "nothing requested for original (its pod may hold the workspace)", func() (bool, error) {
		got := requested("original")
		return len(got) == 0, fmt.Errorf("requested %+v", got)
	})
}
