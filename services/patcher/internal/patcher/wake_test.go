package patcher

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	agentsfake "molt.dev/pkg/generated/clientset/versioned/fake"
	"molt.dev/pkg/upgrade"
)

// A woken paused sandbox whose pod cannot start fails at once with the
// container's own words, not after --pod-ready-timeout with "not Ready":
// the pod is stopped again with the pause right after, so the message must
// carry the cause.
func TestWaitAwakeNamesTheCauseAtOnce(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box-0", Namespace: "default", UID: "sb-uid"}}
	controller := true
	pod := func(status corev1.PodStatus) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "box-0", Namespace: "default", UID: "pod-uid",
				OwnerReferences: []metav1.OwnerReference{{Kind: "Sandbox", Name: "box-0", UID: "sb-uid", Controller: &controller}}},
			Spec:   corev1.PodSpec{NodeName: "node-0"},
			Status: status,
		}
	}
	pulling := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "sandbox",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "my-registry/sandbox-image:v9"`}}}}}
	ready := corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	starting := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "sandbox",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}

	t.Run("image does not pull", func(t *testing.T) {
		p := &Patcher{agents: agentsfake.NewSimpleClientset(), kube: fake.NewClientset(pod(pulling)), wakeTimeout: time.Minute}
		start := time.Now()
		got, why, err := p.waitAwake(context.Background(), sb, "")
		if err != nil || got != nil {
			t.Fatalf("waitAwake = %v, %q, %v; want a failure", got, why, err)
		}
		if time.Since(start) > 10*time.Second {
			t.Errorf("took %s: a pod that will not pull must fail at once", time.Since(start))
		}
		for _, want := range []string{"ImagePullBackOff", "my-registry/sandbox-image:v9", "paused again", "create a new SandboxUpdateOps"} {
			if !strings.Contains(why, want) {
				t.Errorf("message %q lacks %q", why, want)
			}
		}
	})
	t.Run("a resumed upgrade's wake says the template may carry the failed patch", func(t *testing.T) {
		p := &Patcher{agents: agentsfake.NewSimpleClientset(), kube: fake.NewClientset(pod(pulling)), wakeTimeout: time.Minute}
		_, why, err := p.waitAwake(context.Background(), sb, "failed-attempt")
		if err != nil || !strings.Contains(why, "attempt failed-attempt") || !strings.Contains(why, "kubectl edit sbx "+sb.Name) {
			t.Fatalf("waitAwake = %q, %v; want it to name the resumed attempt and how to fix the template", why, err)
		}
	})
	t.Run("woken with the template kept from before the failed patch: says how to give it up", func(t *testing.T) {
		kept := withAttempt(sb, "failed-attempt", agentsv1alpha1.UpgradingReasonPreUpgradeFailed)
		kept.Annotations = map[string]string{
			upgrade.AnnotationOriginalTemplate:    `{"spec":{"containers":[{"name":"sandbox","image":"v1"}]}}`,
			upgrade.AnnotationOriginalTemplateFor: "failed-attempt",
		}
		p := &Patcher{agents: agentsfake.NewSimpleClientset(), kube: fake.NewClientset(pod(pulling)), wakeTimeout: time.Minute}
		_, why, err := p.waitAwake(context.Background(), kept, "failed-attempt")
		if err != nil || !strings.Contains(why, "before the patch of the failed upgrade") || !strings.Contains(why, "kubectl annotate sbx box-0 -n default "+upgrade.AnnotationOriginalTemplateFor+"-") {
			t.Fatalf("waitAwake = %q, %v; want it to say the pod runs the kept template and how to give it up", why, err)
		}
	})
	t.Run("ready", func(t *testing.T) {
		p := &Patcher{agents: agentsfake.NewSimpleClientset(), kube: fake.NewClientset(pod(ready)), wakeTimeout: time.Minute}
		got, why, err := p.waitAwake(context.Background(), sb, "")
		if err != nil || got == nil || why != "" {
			t.Fatalf("waitAwake = %v, %q, %v; want the pod", got, why, err)
		}
	})
	t.Run("still starting at the deadline", func(t *testing.T) {
		p := &Patcher{agents: agentsfake.NewSimpleClientset(), kube: fake.NewClientset(pod(starting)), wakeTimeout: time.Second}
		got, why, err := p.waitAwake(context.Background(), sb, "")
		if err != nil || got != nil || !strings.Contains(why, "not Ready within 1s") || !strings.Contains(why, "ContainerCreating") {
			t.Fatalf("waitAwake = %v, %q, %v; want the timeout with what the pod waited for", got, why, err)
		}
		// A new ops wakes it with the same template (a walk's retry failed
		// the same way): the way on names the edit.
		if !strings.Contains(why, "every new SandboxUpdateOps wakes it with that template first") || !strings.Contains(why, "kubectl edit sbx box-0 -n default") {
			t.Errorf("waitAwake = %q; want it to say a new ops wakes it the same way, and how to edit the template", why)
		}
	})
	t.Run("sandbox deleted during the wait: the wait ends", func(t *testing.T) {
		// A review: each such wake-up held a worker for the whole wake
		// timeout, and a namespace deleted with many woken sandboxes in it
		// could hold them all.
		p := &Patcher{agents: agentsfake.NewSimpleClientset(), kube: fake.NewClientset(pod(starting)), wakeTimeout: time.Minute}
		start := time.Now()
		got, why, err := p.waitAwake(context.Background(), sb, "")
		if !errors.Is(err, errSandboxGone) || got != nil || why != "" {
			t.Fatalf("waitAwake = %v, %q, %v; want errSandboxGone", got, why, err)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("the wait ended after %s; want it to look again within seconds", took)
		}
		p.agents = sandboxesAsNow(t, sb)
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
		defer cancel()
		if _, why, err := p.waitAwake(ctx, sb, ""); errors.Is(err, errSandboxGone) || !strings.Contains(why, "not Ready within") {
			t.Errorf("waitAwake of a sandbox still there = %q, %v; want it to wait on until the deadline", why, err)
		}
	})
	t.Run("unpaused during the wait: says it is not paused again", func(t *testing.T) {
		paused := sb.DeepCopy()
		paused.Spec.Paused = true
		now := sb.DeepCopy() // as the user left it meanwhile
		p := &Patcher{agents: sandboxesAsNow(t, now), kube: fake.NewClientset(pod(pulling)), wakeTimeout: time.Minute}
		_, why, err := p.waitAwake(context.Background(), paused, "")
		if err != nil || !strings.Contains(why, "unpaused meanwhile and is not paused again") {
			t.Fatalf("waitAwake = %q, %v; want it to say the sandbox, unpaused meanwhile, is not paused again", why, err)
		}
		p.agents = sandboxesAsNow(t, paused)
		if _, why, _ := p.waitAwake(context.Background(), sb, ""); !strings.Contains(why, "it is paused again") {
			t.Errorf("waitAwake of a sandbox paused again during the wait = %q; want it to say it is paused again", why)
		}
	})
}

// sandboxesAsNow is an agents clientset that holds sb. (Created through the
// typed client: the fake's tracker would file an object it is given under
// the resource "sandboxs".)
func sandboxesAsNow(t *testing.T, sb *agentsv1alpha1.Sandbox) *agentsfake.Clientset {
	t.Helper()
	c := agentsfake.NewSimpleClientset()
	if _, err := c.AgentsV1alpha1().Sandboxes(sb.Namespace).Create(context.Background(), sb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// A failure before the patch of a paused sandbox woken for the upgrade says
// that it is paused again: "its pod was not touched" alone reads as if the
// woken pod ran on (review).
func TestPausedAgainIsSaidOfAWokenSandbox(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box-0",
		Labels:      map[string]string{agentsv1alpha1.LabelUpdateOps: "up"},
		Annotations: map[string]string{agentsv1alpha1.AnnotationUpgradeResumeTrigger: "true"}}}
	if got := pausedAgain(sb); got != "" {
		t.Errorf("pausedAgain of a running sandbox = %q, want none", got)
	}
	sb.Spec.Paused = true
	if got := pausedAgain(sb); !strings.Contains(got, "paused again") {
		t.Errorf("pausedAgain of a woken paused sandbox = %q, want it to say it is paused again", got)
	}
	delete(sb.Annotations, agentsv1alpha1.AnnotationUpgradeResumeTrigger)
	if got := pausedAgain(sb); got != "" {
		t.Errorf("pausedAgain of a paused sandbox not woken = %q, want none", got)
	}
}
