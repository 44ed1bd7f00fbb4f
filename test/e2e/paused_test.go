package e2e

import (
	"context"
	"fmt"
	"slices"
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

// TestPausedPreUpgradeFailureKeepsTheOldTemplate: two paused sandboxes whose
// woken upgrade failed in PreUpgrade (the hook failed on the pod woken with
// the old template v1, so no backup was taken) carry the failed patch (v2)
// in spec.template. No pod may run v2 before a preUpgrade succeeded on a v1
// pod:
//   - pf-01, unpaused by hand, gets a pod built from v1 (the template its
//     workspace last ran), still PreUpgradeFailed, and the new ops backs it
//     up on that pod before rebuilding it;
//   - pf-00, resumed by the new ops while paused, is woken again on v1, its
//     preUpgrade runs there, then it is rebuilt on v2 and paused again.
func TestPausedPreUpgradeFailureKeepsTheOldTemplate(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	const (
		pool = "pf-pool"
		v1   = "my-registry/sandbox-image:v1"
		v2   = "my-registry/sandbox-image:v2"
	)
	names := makeSandboxes(t, s, ns, "pf", 2, pool, func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/mnt/shared"}}
		sb.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/" + ns + "/shared"}}}}
	})
	woken, unpaused := names[0], names[1]
	pause(t, s, ns, names)
	w := watch(t, s, ns)
	pausedOps := func(name, pre, post string) string {
		y := strings.Replace(hookOps(name, pool, v2, pre, post, 30), "maxUnavailable: 1", "maxUnavailable: 2", 1)
		return strings.Replace(y, "spec:\n", "spec:\n  stateFilter:\n    states: [Paused]\n", 1)
	}

	kubectl(t, pausedOps("pf-up", `echo no space >&2; exit 1`, ""), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "pf-up", agentsv1alpha1.SandboxUpdateOpsFailed, 3*time.Minute)
	for _, n := range names {
		testenv.Eventually(t, time.Minute, n+" PreUpgradeFailed and stopped again", func() (bool, error) {
			sb, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			up := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
			if up == nil || up.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed {
				return false, fmt.Errorf("Upgrading %+v", up)
			}
			if _, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("pod still there (%v)", err)
			}
			return true, nil
		})
		if got := w.images(n); !slices.Equal(got, []string{v1}) {
			t.Errorf("%s: pods created by the failed upgrade run %v, want one woken with the old template [%s]", n, got, v1)
		}
	}
	kubectl(t, "", "delete", "suo", "pf-up", "-n", ns, "--wait=true", "--timeout=60s")

	// Unpaused by hand, it runs the template it ran before the failed upgrade.
	if _, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, unpaused, types.MergePatchType, []byte(`{"spec":{"paused":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("unpause %s: %v", unpaused, err)
	}
	testenv.Eventually(t, time.Minute, unpaused+" has a Ready pod again", func() (bool, error) {
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, unpaused, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pod.DeletionTimestamp == nil && podIsReady(pod), fmt.Errorf("pod %s phase %s", pod.UID, pod.Status.Phase)
	})
	if got := w.images(unpaused); !slices.Equal(got, []string{v1, v1}) {
		t.Errorf("%s unpaused after its failed preUpgrade: pods %v, want [%s %s] (the template before the failed upgrade; no backup was taken)", unpaused, got, v1, v1)
	}
	if c := upgradingCondition(t, s, ns, unpaused); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed {
		t.Errorf("%s unpaused: Upgrading %+v, want still PreUpgradeFailed (a new ops resumes it)", unpaused, c)
	}

	// A new ops resumes both from PreUpgrade, on a pod of the old template.
	const (
		pre  = `echo "pre $(hostname) $(date +%s.%N)" >> /mnt/shared/hooks`
		post = `echo "post $(hostname) $(date +%s.%N)" >> /mnt/shared/hooks`
	)
	kubectl(t, pausedOps("pf-retry", pre, post), "apply", "-n", ns, "-f", "-")
	ops := waitOps(t, s, ns, "pf-retry", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)
	if st := ops.Status; st.Replicas != 2 || st.UpdatedReplicas != 2 || st.FailedReplicas != 0 {
		t.Errorf("pf-retry status %d %d %d, want 2 2 0", st.Replicas, st.UpdatedReplicas, st.FailedReplicas)
	}
	waitPausedWithoutPod(t, s, ns, woken, time.Minute)
	out, code := sh(t, s, ns, unpaused, "cat /mnt/shared/hooks")
	if code != 0 {
		t.Fatalf("read the hook log: exit %d", code)
	}
	lines, bad := parseHookLines(out)
	if len(bad) > 0 {
		t.Fatalf("unreadable hook lines %q in:\n%s", bad, out)
	}
	for _, n := range names {
		images, times := w.images(n), w.addTimes(n)
		// pf-up's wake-up, then the resume's pod of the old template (a
		// wake-up, or the unpause), then the pod of the new one.
		if want := []string{v1, v1, v2}; !slices.Equal(images, want) {
			t.Errorf("%s: pods %v, want %v", n, images, want)
		}
		var pres []float64
		for _, l := range lines {
			if l.host == n && l.kind == "pre" {
				pres = append(pres, l.ts)
			}
		}
		if len(pres) != 1 {
			t.Errorf("%s: %d preUpgrade runs, want 1", n, len(pres))
			continue
		}
		for i, img := range images {
			if at := float64(times[i].UnixNano()) / 1e9; img != v1 && at < pres[0] {
				t.Errorf("%s: a pod of %s was created at %.3f, before preUpgrade succeeded (%.3f)", n, img, at, pres[0])
			}
		}
	}
}

func podIsReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestPausedWakeFailedTwiceIsBackedUpOnItsResume (walk): a paused sandbox
// whose template no longer starts fails its wake-up for an ops, then again
// for the next one; its template set right, a third ops wakes it, backs its
// workspace (on a persistent volume) up, and restores that. Before, the
// third resume counted the chain of two failed attempts as one that may
// have replaced the pod: it was not woken, skipped preUpgrade, and its
// postUpgrade restored an older backup over the newer workspace.
func TestPausedWakeFailedTwiceIsBackedUpOnItsResume(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	const (
		pool  = "pw-pool"
		v1    = "my-registry/sandbox-image:v1"
		crash = "my-registry/sandbox-image:v1-crash"
		v2    = "my-registry/sandbox-image:v2"
	)
	names := makeSandboxes(t, s, ns, "pw", 1, pool, func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/mnt/shared"}, {Name: "workspace", MountPath: "/home/user/workspace"}}
		sb.Spec.Template.Spec.Volumes = []corev1.Volume{
			{Name: "shared", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/" + ns + "/" + sb.Name + "/shared"}}},
			{Name: "workspace", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/" + ns + "/" + sb.Name + "/workspace"}}},
		}
	})
	name := names[0]
	// An older backup where the hooks keep theirs, then newer work.
	if _, code := sh(t, s, ns, name, "mkdir -p /home/user/workspace/sub && echo older > /home/user/workspace/sub/file.txt && tar czf /mnt/shared/ws-$(hostname).tgz -C /home/user/workspace . && echo newer > /home/user/workspace/sub/file.txt"); code != 0 {
		t.Fatalf("seed the workspace of %s: exit %d", name, code)
	}
	pause(t, s, ns, names)
	setImage := func(image string) {
		t.Helper()
		patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":%q}]`, image)
		if _, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("set the image of %s to %s: %v", name, image, err)
		}
	}
	pausedOps := func(opsName string) string {
		y := hookOps(opsName, pool, v2, backupHook, restoreHook, 30)
		return strings.Replace(y, "spec:\n", "spec:\n  stateFilter:\n    states: [Paused]\n", 1)
	}
	setImage(crash) // the template it was paused with no longer starts
	for _, opsName := range []string{"pw-1", "pw-2"} {
		kubectl(t, pausedOps(opsName), "apply", "-n", ns, "-f", "-")
		waitOps(t, s, ns, opsName, agentsv1alpha1.SandboxUpdateOpsFailed, 3*time.Minute)
		if c := upgradingCondition(t, s, ns, name); c == nil || c.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed {
			t.Fatalf("after %s: Upgrading %+v, want PreUpgradeFailed (the wake-up failed)", opsName, c)
		}
		kubectl(t, "", "delete", "suo", opsName, "-n", ns, "--wait=true", "--timeout=60s")
		testenv.Eventually(t, time.Minute, name+" stopped again", func() (bool, error) {
			_, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Errorf("pod still there (%v)", err)
		})
	}
	setImage(v1)
	kubectl(t, pausedOps("pw-3"), "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "pw-3", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)
	waitPausedWithoutPod(t, s, ns, name, time.Minute)
	if _, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"paused":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("unpause %s: %v", name, err)
	}
	testenv.Eventually(t, time.Minute, name+" has a Ready pod again", func() (bool, error) {
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pod.DeletionTimestamp == nil && podIsReady(pod) && pod.Spec.Containers[0].Image == v2, fmt.Errorf("pod %s image %s phase %s", pod.UID, pod.Spec.Containers[0].Image, pod.Status.Phase)
	})
	if out, _ := sh(t, s, ns, name, "cat /home/user/workspace/sub/file.txt"); strings.TrimSpace(out) != "newer" {
		t.Fatalf("workspace of %s after the upgrade = %q, want \"newer\" (the work since the older backup)", name, strings.TrimSpace(out))
	}
}
