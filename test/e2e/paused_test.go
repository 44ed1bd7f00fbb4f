package e2e

import (
	"context"
	"fmt"
	"strings"
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

// pause sets spec.paused of the sandboxes and waits until each is Paused
// with no pod.
func pause(t *testing.T, s *stack, ns string, names []string) {
	t.Helper()
	ctx := context.Background()
	for _, n := range names {
		if _, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, n, types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("pause %s: %v", n, err)
		}
	}
	for _, n := range names {
		waitPausedWithoutPod(t, s, ns, n, time.Minute)
	}
}

// waitPausedWithoutPod waits until sandbox ns/n is in phase Paused with
// SandboxPaused=True and has no pod.
func waitPausedWithoutPod(t *testing.T, s *stack, ns, n string, timeout time.Duration) *agentsv1alpha1.Sandbox {
	t.Helper()
	ctx := context.Background()
	var sb *agentsv1alpha1.Sandbox
	testenv.Eventually(t, timeout, n+" Paused without a pod", func() (bool, error) {
		var err error
		if sb, err = s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, n, metav1.GetOptions{}); err != nil {
			return false, err
		}
		_, err = s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err == nil {
			return false, fmt.Errorf("phase %s, pod still exists", sb.Status.Phase)
		}
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		if !meta.IsStatusConditionTrue(sb.Status.Conditions, agentsv1alpha1.ConditionSandboxPaused) || sb.Status.Phase != agentsv1alpha1.SandboxPaused {
			return false, fmt.Errorf("phase %s, conditions %+v", sb.Status.Phase, sb.Status.Conditions)
		}
		return true, nil
	})
	return sb
}

// TestPausedSandboxesUpgradeInTwoPhases (issue 9): 4 paused sandboxes and 2
// running ones; an ops with stateFilter [Running, Paused] and maxUnavailable
// 2 wakes each paused sandbox with its old template, backs it up on that
// pod, recreates the pod on the new template, restores on the new pod, and
// pauses it again. The ops ends Completed 6 6 0 0 with never more than 2
// sandboxes upgrading (or resuming) at once; the 4 end Paused with no pod
// and the new template, the 2 Running. Then an ops with the default filter
// upgrades the 2 running ones and leaves the paused ones untouched.
func TestPausedSandboxesUpgradeInTwoPhases(t *testing.T) {
	s := Stack(t)
	ns := s.env.Namespace(t)
	const pool = "pz-pool"
	// Every sandbox mounts one host directory, so a running one can read what
	// the hooks of the paused ones wrote there.
	names := makeSandboxes(t, s, ns, "pz", 6, pool, func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/mnt/shared"}}
		sb.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/" + ns + "/shared"}}}}
	})
	paused, running := names[:4], names[4:]
	pause(t, s, ns, paused)

	w := watch(t, s, ns)
	const (
		pre  = `echo "pre $(hostname) $(date +%s.%N)" >> /mnt/shared/hooks`
		post = `echo "post $(hostname) $(date +%s.%N)" >> /mnt/shared/hooks`
	)
	y := strings.Replace(hookOps("pz", pool, "my-registry/sandbox-image:v2", pre, post, 30), "maxUnavailable: 1", "maxUnavailable: 2", 1)
	y = strings.Replace(y, "spec:\n", "spec:\n  stateFilter:\n    states: [Running, Paused]\n", 1)
	kubectl(t, y, "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "pz", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)
	if st := ops.Status; st.Replicas != 6 || st.UpdatedReplicas != 6 || st.UpdatingReplicas != 0 || st.FailedReplicas != 0 {
		t.Fatalf("ops status %d %d %d %d, want 6 6 0 0", st.Replicas, st.UpdatedReplicas, st.UpdatingReplicas, st.FailedReplicas)
	}
	maxUp, saw, adds := w.snapshot()
	if maxUp > 2 {
		t.Errorf("%d sandboxes upgrading or resuming at once, want at most 2 (maxUnavailable)", maxUp)
	}
	ctx := context.Background()
	for _, n := range paused {
		sb := waitPausedWithoutPod(t, s, ns, n, time.Minute)
		if img := sb.Spec.Template.Spec.Containers[0].Image; img != "my-registry/sandbox-image:v2" {
			t.Errorf("%s: template image %s, want the new one", n, img)
		}
		if !saw[n] {
			t.Errorf("%s was never seen upgrading or resuming", n)
		}
		if len(adds[n]) != 2 {
			t.Errorf("%s: %d pods created, want 2 (woken with the old template, then the new one): %v", n, len(adds[n]), adds[n])
		}
	}
	for _, n := range running {
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod of running sandbox %s: %v", n, err)
		}
		if pod.Spec.Containers[0].Image != "my-registry/sandbox-image:v2" || len(adds[n]) != 1 {
			t.Errorf("%s: pod image %s, %d pods created; want the new image, 1 pod", n, pod.Spec.Containers[0].Image, len(adds[n]))
		}
	}

	// The hooks: preUpgrade after the woken pod appeared and before the new
	// one did, postUpgrade after the new one, once each.
	out, code := sh(t, s, ns, running[0], "cat /mnt/shared/hooks")
	if code != 0 {
		t.Fatalf("read the hook log: exit %d", code)
	}
	lines, bad := parseHookLines(out)
	if len(bad) > 0 {
		t.Fatalf("unreadable hook lines %q in:\n%s", bad, out)
	}
	for _, n := range paused {
		times := w.addTimes(n)
		if len(times) != 2 {
			continue // reported above
		}
		woken, rebuilt := float64(times[0].UnixNano())/1e9, float64(times[1].UnixNano())/1e9
		var pres, posts []float64
		for _, l := range lines {
			if l.host != n {
				continue
			}
			if l.kind == "pre" {
				pres = append(pres, l.ts)
			} else {
				posts = append(posts, l.ts)
			}
		}
		switch {
		case len(pres) != 1 || len(posts) != 1:
			t.Errorf("%s: %d preUpgrade and %d postUpgrade runs, want 1 each", n, len(pres), len(posts))
		case pres[0] < woken || pres[0] > rebuilt:
			t.Errorf("%s: preUpgrade at %.3f, not on the woken pod (seen at %.3f, replaced at %.3f)", n, pres[0], woken, rebuilt)
		case posts[0] < rebuilt:
			t.Errorf("%s: postUpgrade at %.3f, before the new pod was seen (%.3f)", n, posts[0], rebuilt)
		}
	}

	// Without Paused in the filter, paused sandboxes are never touched.
	w2 := watch(t, s, ns)
	kubectl(t, opsYAML("pz-run", pool, "2", "my-registry/sandbox-image:v3"), "apply", "-n", ns, "-f", "-")
	ops = waitOps(t, s, ns, "pz-run", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	if st := ops.Status; st.Replicas != 2 || st.UpdatedReplicas != 2 {
		t.Errorf("default-filter ops status %d %d, want 2 2 (the running sandboxes only)", st.Replicas, st.UpdatedReplicas)
	}
	_, _, adds2 := w2.snapshot()
	for _, n := range paused {
		sb := waitPausedWithoutPod(t, s, ns, n, time.Minute)
		if len(adds2[n]) != 0 || sb.Spec.Template.Spec.Containers[0].Image != "my-registry/sandbox-image:v2" || sb.Labels[agentsv1alpha1.LabelUpdateOps] == "pz-run" {
			t.Errorf("paused %s touched by a default-filter ops: %d pods created, image %s, ops label %q",
				n, len(adds2[n]), sb.Spec.Template.Spec.Containers[0].Image, sb.Labels[agentsv1alpha1.LabelUpdateOps])
		}
	}
}

// hookLine is one line a test hook wrote: "<kind> <hostname> <unix time>".
type hookLine struct {
	kind, host string
	ts         float64
}

func parseHookLines(out string) ([]hookLine, []string) {
	var lines []hookLine
	var bad []string
	for _, raw := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(raw)
		var ts float64
		if len(f) != 3 {
			bad = append(bad, raw)
			continue
		}
		if _, err := fmt.Sscanf(f[2], "%f", &ts); err != nil {
			bad = append(bad, raw)
			continue
		}
		lines = append(lines, hookLine{kind: f[0], host: f[1], ts: ts})
	}
	return lines, bad
}
