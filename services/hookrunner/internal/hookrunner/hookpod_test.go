package hookrunner

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	"molt.dev/pkg/upgrade"
)

// A pod read the API server does not answer is retried (an error), not
// filed as the hook's failure; a pod that is gone is a failure that says
// what to do next.
func TestHookPodRetriesWhatTheAPIServerDidNotAnswer(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns"}}
	d := events.Data{Attempt: "a1", OldPodUID: "old"}

	kube := fake.NewClientset()
	kube.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServerTimeout(schema.GroupResource{Resource: "pods"}, "get", 1)
	})
	h := &HookRunner{kube: kube}
	for _, st := range []step{preStep, postStep} {
		pod, reason, err := h.hookPod(context.Background(), sb, st, d)
		if err == nil || pod != nil || reason != "" {
			t.Errorf("%s, API server timeout: pod %v, reason %q, err %v; want an error to retry", st.hook, pod, reason, err)
		}
	}

	h = &HookRunner{kube: fake.NewClientset()} // no pod at all
	for _, st := range []step{preStep, postStep} {
		pod, reason, err := h.hookPod(context.Background(), sb, st, d)
		if err != nil || pod != nil || reason == "" {
			t.Errorf("%s, pod gone: pod %v, reason %q, err %v; want a failure reason", st.hook, pod, reason, err)
		}
	}
}

// A pod of the sandbox's name that the sandbox does not control (an earlier
// sandbox's, waiting for the garbage collector) never runs a hook: backing
// it up would put a foreign workspace in this sandbox's backup (rule 12).
func TestHookPodRefusesAPodTheSandboxDoesNotControl(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "new-sandbox"}}
	controller := true
	foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "old",
		OwnerReferences: []metav1.OwnerReference{{Kind: "Sandbox", Name: "box", UID: "earlier-sandbox", Controller: &controller}}}}
	d := events.Data{Attempt: "a1", OldPodUID: "old"}
	h := &HookRunner{kube: fake.NewClientset(foreign)}
	pod, reason, err := h.hookPod(context.Background(), sb, preStep, d)
	if err != nil || pod != nil || !strings.Contains(reason, "not controlled by sandbox box") {
		t.Fatalf("hookPod = %v, %q, %v; want a refusal naming the sandbox", pod, reason, err)
	}
	own := foreign.DeepCopy()
	own.OwnerReferences[0].UID = sb.UID
	h = &HookRunner{kube: fake.NewClientset(own)}
	if pod, reason, err := h.hookPod(context.Background(), sb, preStep, d); err != nil || pod == nil || reason != "" {
		t.Fatalf("hookPod of its own pod = %v, %q, %v; want the pod", pod, reason, err)
	}
}

// preUpgrade is never run on a pod being deleted (a backup cut short as it
// stops would overwrite the good one); the message is looked at again once
// the pod is gone, not dropped.
func TestHookPodSkipsPreUpgradeOnAStoppingPod(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "sb"}}
	controller := true
	stopping := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "old", DeletionTimestamp: &metav1.Time{}, Finalizers: []string{"x"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Sandbox", Name: "box", UID: "sb", Controller: &controller}}}}
	h := &HookRunner{kube: fake.NewClientset(stopping)}
	pod, reason, err := h.hookPod(context.Background(), sb, preStep, events.Data{Attempt: "a1", OldPodUID: "old"})
	if err == nil || pod != nil || reason != "" || !strings.Contains(err.Error(), "is being deleted") {
		t.Fatalf("hookPod = %v, %q, %v; want an error to look again", pod, reason, err)
	}

	// One whose backup this attempt already took (its done mark: a redelivery
	// after prehook-done, which podcycler is acting on) is passed on, not
	// retried until its last delivery files a failure.
	backedUp := stopping.DeepCopy()
	backedUp.Annotations = map[string]string{upgrade.HookDoneAnnotation(preStep.stage): "a1"}
	h = &HookRunner{kube: fake.NewClientset(backedUp)}
	pod, reason, err = h.hookPod(context.Background(), sb, preStep, events.Data{Attempt: "a1", OldPodUID: "old"})
	if err != nil || pod == nil || reason != "" {
		t.Fatalf("hookPod of a stopping pod backed up by this attempt = %v, %q, %v; want the pod, whose done mark passes it on", pod, reason, err)
	}
}

// The done mark of a hook that ran is written again while the API server
// fails it, so a redelivery finds it and does not run the hook again.
func TestDoneMarkIsRetriedAfterABlip(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "p1"}}
	kube := fake.NewClientset(pod)
	fails := 2
	kube.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fails > 0 {
			fails--
			return true, nil, apierrors.NewServerTimeout(schema.GroupResource{Resource: "pods"}, "patch", 1)
		}
		return false, nil, nil
	})
	h := &HookRunner{kube: kube}
	if err := h.markDoneRetrying(context.Background(), pod, preStep, "a1", "preUpgrade exited 0 but wrote to stderr: x"); err != nil {
		t.Fatalf("markDoneRetrying after two timeouts: %v", err)
	}
	got, err := kube.CoreV1().Pods("ns").Get(context.Background(), "box", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[upgrade.HookDoneAnnotation(preStep.stage)] != "a1" || got.Annotations[upgrade.HookNoteAnnotation(preStep.stage)] != "preUpgrade exited 0 but wrote to stderr: x" {
		t.Errorf("pod annotations %v, want the done mark of attempt a1 with its note", got.Annotations)
	}
	// A later attempt's hook with nothing on stderr drops the note.
	if err := h.markDoneRetrying(context.Background(), got, preStep, "a2", ""); err != nil {
		t.Fatal(err)
	}
	got, err = kube.CoreV1().Pods("ns").Get(context.Background(), "box", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[upgrade.HookNoteAnnotation(preStep.stage)]; ok || got.Annotations[upgrade.HookDoneAnnotation(preStep.stage)] != "a2" {
		t.Errorf("pod annotations %v, want attempt a2's done mark and no note", got.Annotations)
	}
}

// A hook not run because the pod is not the one the attempt names says which pod
// the attempt named (or that there was none, never "(uid )") and the next step.
func TestHookPodOfAnotherPodSaysWhatToDo(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "sb"}}
	controller := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "p2",
		OwnerReferences: []metav1.OwnerReference{{Kind: "Sandbox", Name: "box", UID: "sb", Controller: &controller}}}}
	built := pod.DeepCopy()
	built.Annotations = map[string]string{upgrade.AnnotationPodAttempt: "a1"}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		st   step
		d    events.Data
		want []string
	}{
		{"preUpgrade, no pod when the upgrade began", pod, preStep, events.Data{Attempt: "a1"},
			[]string{"no pod existed when the upgrade began", "pod box (uid p2)", "create a new SandboxUpdateOps to resume; it continues from the failed step"}},
		{"preUpgrade, another pod", pod, preStep, events.Data{Attempt: "a1", OldPodUID: "p1"},
			[]string{"(uid p1)", "now has uid p2", "create a new SandboxUpdateOps to resume; it continues from the failed step"}},
		{"postUpgrade, a pod this upgrade did not build", pod, postStep, events.Data{Attempt: "a1"},
			[]string{"was not built by attempt a1", "create a new SandboxUpdateOps to resume"}},
		{"postUpgrade, another new pod", built, postStep, events.Data{Attempt: "a1", NewPodUID: "p1"},
			[]string{"new pod (uid p1)", "now has uid p2", "create a new SandboxUpdateOps to resume; it continues from the failed step"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &HookRunner{kube: fake.NewClientset(tc.pod)}
			got, reason, err := h.hookPod(context.Background(), sb, tc.st, tc.d)
			if err != nil || got != nil {
				t.Fatalf("hookPod = %v, %q, %v; want a reason", got, reason, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(reason, w) {
					t.Errorf("reason %q\nwant it to contain %q", reason, w)
				}
			}
			if strings.Contains(reason, "(uid )") {
				t.Errorf("reason %q names an empty uid", reason)
			}
		})
	}
}

// postUpgrade is not run on a pod being deleted, done mark or not: what it
// restores would go with the pod, and the attempt would end Succeeded on the
// empty pod built next. The message is looked at again once the pod is gone.
func TestHookPodSkipsPostUpgradeOnAStoppingPod(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "sb"}}
	controller := true
	stopping := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "new", DeletionTimestamp: &metav1.Time{}, Finalizers: []string{"x"},
		Annotations:     map[string]string{upgrade.AnnotationPodAttempt: "a1"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Sandbox", Name: "box", UID: "sb", Controller: &controller}}}}
	for _, done := range []bool{false, true} {
		pod := stopping.DeepCopy()
		if done {
			pod.Annotations[upgrade.HookDoneAnnotation(postStep.stage)] = "a1"
		}
		h := &HookRunner{kube: fake.NewClientset(pod)}
		got, reason, err := h.hookPod(context.Background(), sb, postStep, events.Data{Attempt: "a1", NewPodUID: "new"})
		if err == nil || got != nil || reason != "" || !strings.Contains(err.Error(), "is being deleted") {
			t.Errorf("done mark %v: hookPod = %v, %q, %v; want an error to look again", done, got, reason, err)
		}
	}
	running := stopping.DeepCopy()
	running.DeletionTimestamp, running.Finalizers = nil, nil
	h := &HookRunner{kube: fake.NewClientset(running)}
	if got, reason, err := h.hookPod(context.Background(), sb, postStep, events.Data{Attempt: "a1", NewPodUID: "new"}); err != nil || got == nil || reason != "" {
		t.Errorf("hookPod of the running new pod = %v, %q, %v; want the pod", got, reason, err)
	}
}

// A postUpgrade that succeeded in a pod deleted (or replaced, or stopping)
// while it ran does not count: what it restored went with the pod. Its
// preUpgrade counterpart stands (the backup is outside the pod), and so does
// a postUpgrade whose pod still runs.
func TestPostUpgradeIntoAPodDeletedMeanwhileDoesNotCount(t *testing.T) {
	ran := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "new"}}
	replaced := ran.DeepCopy()
	replaced.UID = "newer"
	stopping := ran.DeepCopy()
	stopping.DeletionTimestamp, stopping.Finalizers = &metav1.Time{}, []string{"x"}
	for _, c := range []struct {
		name string
		now  []runtime.Object
		st   step
		lost bool
	}{
		{"still running", []runtime.Object{ran.DeepCopy()}, postStep, false},
		{"gone", nil, postStep, true},
		{"replaced", []runtime.Object{replaced}, postStep, true},
		{"stopping", []runtime.Object{stopping}, postStep, true},
		{"preUpgrade, gone", nil, preStep, false},
	} {
		h := &HookRunner{kube: fake.NewClientset(c.now...)}
		lost := h.lostDuringHook(context.Background(), ran, c.st)
		if (lost != "") != c.lost || (c.lost && !strings.Contains(lost, "was deleted while postUpgrade ran")) {
			t.Errorf("%s: lostDuringHook = %q; want lost %v", c.name, lost, c.lost)
		}
	}
	// The API server does not answer: the hook ran to success, and counts.
	kube := fake.NewClientset()
	kube.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServerTimeout(schema.GroupResource{Resource: "pods"}, "get", 1)
	})
	h := &HookRunner{kube: kube}
	if lost := h.lostDuringHook(context.Background(), ran, postStep); lost != "" {
		t.Errorf("API server timeout: lostDuringHook = %q; want it counted", lost)
	}
}
