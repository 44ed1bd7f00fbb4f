package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// poolState is what the sandboxes of a SandboxSet look like now.
type poolState struct {
	members, running, updated, updatedRunning int
	claimed                                   []string
}

// readPool counts the members of set ns/name (controller = the set, not
// being deleted) on revision (""), and lists the claimed ones.
func readPool(t *testing.T, s *stack, ns, name string, revision string) (poolState, error) {
	t.Helper()
	list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(context.Background(), metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelSandboxPool + "=" + name})
	if err != nil {
		return poolState{}, err
	}
	var st poolState
	for _, sb := range list.Items {
		ref := metav1.GetControllerOf(&sb)
		if ref == nil || ref.Kind != "SandboxSet" {
			if sb.Labels[agentsv1alpha1.LabelSandboxClaimed] == "true" {
				st.claimed = append(st.claimed, sb.Name)
			}
			continue
		}
		if sb.DeletionTimestamp != nil {
			continue
		}
		st.members++
		running := sb.Status.Phase == agentsv1alpha1.SandboxRunning
		if running {
			st.running++
		}
		if revision != "" && sb.Labels[agentsv1alpha1.LabelTemplateHash] == revision {
			st.updated++
			if running {
				st.updatedRunning++
			}
		}
	}
	return st, nil
}

// setMembers lists the names of set's unclaimed members.
func setMembers(t *testing.T, s *stack, ns string, set *agentsv1alpha1.SandboxSet) []string {
	t.Helper()
	list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(context.Background(), metav1.ListOptions{LabelSelector: set.Status.Selector})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("list the members of %s: %v (%d)", set.Name, err, len(list.Items))
	}
	var names []string
	for _, sb := range list.Items {
		names = append(names, sb.Name)
	}
	return names
}

// waitSetConverged waits until set ns/name has replicas members, all
// Running on its status.updateRevision, and its status says so exactly.
func waitSetConverged(t *testing.T, s *stack, ns, name string, replicas int32, timeout time.Duration) *agentsv1alpha1.SandboxSet {
	t.Helper()
	var set *agentsv1alpha1.SandboxSet
	testenv.Eventually(t, timeout, fmt.Sprintf("SandboxSet %s converged on %d replicas", name, replicas), func() (bool, error) {
		var err error
		if set, err = s.agents.AgentsV1alpha1().SandboxSets(ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		st := set.Status
		pool, err := readPool(t, s, ns, name, st.UpdateRevision)
		if err != nil {
			return false, err
		}
		r := int(replicas)
		ok := st.ObservedGeneration == set.Generation && st.UpdateRevision != "" &&
			pool.members == r && pool.updatedRunning == r &&
			st.Replicas == replicas && st.AvailableReplicas == replicas && st.UpdatedReplicas == replicas && st.UpdatedAvailableReplicas == replicas
		return ok, fmt.Errorf("pool %+v; status %+v (generation %d)", pool, st, set.Generation)
	})
	return set
}

// TestSandboxSetPool (issue 9): a SandboxSet keeps 10 unclaimed sandboxes;
// a member whose pod failed is replaced; 3 are claimed (label sandbox-claimed=true, controller owner reference
// removed, as the sandbox manager does) and the pool refills; a template
// change rolls the 10 unclaimed members onto the new revision with never
// more than 2 of the 10 unavailable (default maxUnavailable 20%, sampled
// every 100 ms), and the claimed sandboxes keep their pods; `kubectl scale`
// to 15 and then 5 converges with an exact status; `kubectl get sbs` shows
// the columns of API.md; a template whose pod the API server refuses
// replaces nothing and shows a TemplateRefused Event until it is fixed.
func TestSandboxSetPool(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	ctx := context.Background()
	kubectl(t, `apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata:
  name: warm
spec:
  replicas: 10
  template:
    spec:
      containers:
      - name: sandbox
        image: my-registry/sandbox-image:v1
`, "apply", "-n", ns, "-f", "-")
	set := waitSetConverged(t, s, ns, "warm", 10, 2*time.Minute)
	if want := "agents.kruise.io/sandbox-claimed=false,agents.kruise.io/sandbox-pool=warm"; set.Status.Selector != want {
		t.Errorf("status.selector %q, want %q", set.Status.Selector, want)
	}

	// A dead member (its pod failed) is replaced.
	dead := setMembers(t, s, ns, set)[0]
	pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, dead, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod of member %s: %v", dead, err)
	}
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason, pod.Status.Message = "Evicted", "the test failed the pod"
	if _, err := s.env.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("fail the pod of member %s: %v", dead, err)
	}
	testenv.Eventually(t, time.Minute, "dead member "+dead+" replaced", func() (bool, error) {
		_, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, dead, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Errorf("member %s still there: %v", dead, err)
	})
	waitSetConverged(t, s, ns, "warm", 10, 2*time.Minute)

	// Claim 3.
	pool, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{LabelSelector: set.Status.Selector})
	if err != nil || len(pool.Items) < 3 {
		t.Fatalf("list the pool: %v (%d members)", err, len(pool.Items))
	}
	claimedUID := map[string]string{}
	for _, sb := range pool.Items[:3] {
		patch := `{"metadata":{"labels":{"agents.kruise.io/sandbox-claimed":"true"},"ownerReferences":null}}`
		if _, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, sb.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("claim %s: %v", sb.Name, err)
		}
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, sb.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod of claimed %s: %v", sb.Name, err)
		}
		claimedUID[sb.Name] = string(pod.UID)
	}
	waitSetConverged(t, s, ns, "warm", 10, 2*time.Minute)

	// Roll the template, sampling unavailability every 100 ms.
	var mu sync.Mutex
	worst, samples, worstAt := 0, 0, ""
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			p, err := readPool(t, s, ns, "warm", "")
			if err != nil {
				continue
			}
			mu.Lock()
			samples++
			if u := 10 - p.running; u > worst {
				worst, worstAt = u, fmt.Sprintf("%+v", p)
			}
			mu.Unlock()
		}
	}()
	kubectl(t, "", "patch", "sbs", "warm", "-n", ns, "--type", "merge", "-p",
		`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v2"}]}}}}`)
	set = waitSetConverged(t, s, ns, "warm", 10, 3*time.Minute)
	close(stop)
	<-done
	if set.Status.UpdateRevision == "" {
		t.Fatal("no updateRevision")
	}
	mu.Lock()
	if worst > 2 {
		t.Errorf("%d of 10 members unavailable at once during the rolling update, want at most 2 (maxUnavailable 20%%): %s", worst, worstAt)
	}
	if samples < 10 {
		t.Errorf("only %d samples of the pool: the sampler proves nothing", samples)
	}
	mu.Unlock()
	members, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{LabelSelector: set.Status.Selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range members.Items {
		if img := sb.Spec.Template.Spec.Containers[0].Image; img != "my-registry/sandbox-image:v2" {
			t.Errorf("member %s on image %s after the rolling update", sb.Name, img)
		}
	}
	for name, uid := range claimedUID {
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("claimed %s lost its pod: %v", name, err)
		case string(pod.UID) != uid || pod.Spec.Containers[0].Image != "my-registry/sandbox-image:v1":
			t.Errorf("claimed %s touched by the pool: pod %s on %s, was %s on v1", name, pod.UID, pod.Spec.Containers[0].Image, uid)
		}
	}

	// Scale through the scale subresource.
	kubectl(t, "", "scale", "sbs", "warm", "-n", ns, "--replicas", "15")
	waitSetConverged(t, s, ns, "warm", 15, 2*time.Minute)
	kubectl(t, "", "scale", "sbs", "warm", "-n", ns, "--replicas", "5")
	waitSetConverged(t, s, ns, "warm", 5, 2*time.Minute)

	out := kubectl(t, "", "get", "sbs", "warm", "-n", ns)
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	want := []string{"NAME", "REPLICAS", "AVAILABLE", "UPDATEDREPLICAS", "UPDATEDAVAILABLEREPLICAS", "UPDATEREVISION", "AGE"}
	if strings.Join(header, " ") != strings.Join(want, " ") {
		t.Errorf("kubectl get sbs columns %v, want %v", header, want)
	}

	t.Run("refused template replaces nothing", func(t *testing.T) {
		live := func() []string {
			list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{LabelSelector: set.Status.Selector})
			if err != nil {
				t.Fatalf("list the pool: %v", err)
			}
			var names []string
			for _, sb := range list.Items {
				if sb.DeletionTimestamp == nil {
					names = append(names, sb.Name)
				}
			}
			slices.Sort(names)
			return names
		}
		before := live()
		// CPU requests above the limit: the API server refuses the pod (Invalid).
		kubectl(t, "", "patch", "sbs", "warm", "-n", ns, "--type", "merge", "-p",
			`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v3","resources":{"requests":{"cpu":"2"},"limits":{"cpu":"1"}}}]}}}}`)
		testenv.Eventually(t, time.Minute, "a Warning Event TemplateRefused on SandboxSet warm", func() (bool, error) {
			evs, err := s.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=warm,reason=TemplateRefused"})
			if err != nil {
				return false, err
			}
			for _, ev := range evs.Items {
				if ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.Kind == "SandboxSet" && strings.Contains(ev.Message, "no idle sandbox was replaced") {
					return true, nil
				}
			}
			return false, fmt.Errorf("%d TemplateRefused Events: %+v", len(evs.Items), evs.Items)
		})
		// The sync that recorded the refusal would have deleted members before
		// the Event reached the API server.
		if after := live(); !slices.Equal(after, before) {
			t.Errorf("members %v after the refused template, want %v untouched", after, before)
		}
		refusedCondition := func() *metav1.Condition {
			got, err := s.agents.AgentsV1alpha1().SandboxSets(ns).Get(ctx, "warm", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get SandboxSet warm: %v", err)
			}
			return meta.FindStatusCondition(got.Status.Conditions, "TemplateRefused")
		}
		if c := refusedCondition(); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "would not run") {
			t.Errorf("TemplateRefused condition = %+v, want True saying why", c)
		}

		kubectl(t, "", "patch", "sbs", "warm", "-n", ns, "--type", "merge", "-p",
			`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":"my-registry/sandbox-image:v3"}]}}}}`)
		waitSetConverged(t, s, ns, "warm", 5, 2*time.Minute)
		if c := refusedCondition(); c == nil || c.Status != metav1.ConditionFalse {
			t.Errorf("TemplateRefused condition after the fix = %+v, want False", c)
		}
	})
}

// A warm pool whose members' containers exit under restartPolicy Never (the
// local kubelet ends such a pod Failed) keeps its dead members after a few
// replacements and says so: MembersFailing=True, DeadMembersKept, with the
// container's words and the way on. A walk could not reach this on the local
// stack: every crash was a CrashLoopBackOff, whatever the restart policy.
func TestSandboxSetKeepsMembersThatDie(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	kubectl(t, `apiVersion: agents.kruise.io/v1alpha1
kind: SandboxSet
metadata: {name: dying}
spec:
  replicas: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: sandbox, image: my-registry/crash-image:v1}]
`, "apply", "-n", ns, "-f", "-")
	var failing *metav1.Condition
	testenv.Eventually(t, 2*time.Minute, "MembersFailing on set dying", func() (bool, error) {
		set, err := s.agents.AgentsV1alpha1().SandboxSets(ns).Get(context.Background(), "dying", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		failing = meta.FindStatusCondition(set.Status.Conditions, "MembersFailing")
		return failing != nil && failing.Status == metav1.ConditionTrue, fmt.Errorf("MembersFailing %+v", failing)
	})
	if failing.Reason != "DeadMembersKept" {
		t.Errorf("MembersFailing reason %q, want DeadMembersKept", failing.Reason)
	}
	for _, want := range []string{"container sandbox exited with code 1", "kubectl edit sbs dying -n " + ns} {
		if !strings.Contains(failing.Message, want) {
			t.Errorf("MembersFailing message %q lacks %q", failing.Message, want)
		}
	}
	list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(context.Background(), metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelSandboxPool + "=dying"})
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, sb := range list.Items {
		if sb.Status.Phase == agentsv1alpha1.SandboxFailed {
			failed++
		}
	}
	if failed == 0 {
		t.Errorf("no member of set dying is Failed (%d members)", len(list.Items))
	}
}
