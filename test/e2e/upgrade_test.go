package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// TestSeedBasicUpgrade applies seed 000's basic example verbatim (namespace
// default, maxUnavailable 2) to 10 Running sandboxes of my-sandbox-pool.
func TestSeedBasicUpgrade(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	const ns = "default"
	t.Cleanup(func() {
		_ = s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Delete(ctx, "upgrade-my-sandboxes", metav1.DeleteOptions{})
		_ = s.agents.AgentsV1alpha1().Sandboxes(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: poolLabel + "=my-sandbox-pool"})
	})
	names := makeSandboxes(t, s, ns, "basic", 10, "my-sandbox-pool", nil)
	oldPods := map[string]string{}
	for _, n := range names {
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		oldPods[n] = string(pod.UID)
	}
	w := watch(t, s, ns)

	kubectl(t, seed(t, "000-01-sandboxupdateops-upgrade-my-sandboxes.yaml"), "apply", "-f", "-")
	waitOps(t, s, ns, "upgrade-my-sandboxes", agentsv1alpha1.SandboxUpdateOpsCompleted, 3*time.Minute)

	out := kubectl(t, "", "get", "suo", "upgrade-my-sandboxes", "-n", ns, "--no-headers")
	if f := strings.Fields(out); len(f) < 6 || strings.Join(f[1:6], " ") != "Completed 10 10 0 0" {
		t.Fatalf("kubectl get suo = %q, want Completed 10 10 0 0", out)
	}
	maxUp, saw, adds := w.snapshot()
	if maxUp > 2 {
		t.Fatalf("watcher saw %d sandboxes upgrading at once, maxUnavailable is 2", maxUp)
	}
	for _, n := range names {
		if !saw[n] {
			t.Errorf("sandbox %s was never seen Upgrading", n)
		}
		if len(adds[n]) != 1 {
			t.Errorf("sandbox %s: %d pods created during the upgrade, want exactly 1 (%v)", n, len(adds[n]), adds[n])
			continue
		}
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(pod.UID) == oldPods[n] || string(pod.UID) != adds[n][0] {
			t.Errorf("sandbox %s: pod uid %s, old %s, created %v", n, pod.UID, oldPods[n], adds[n])
		}
		if img := pod.Spec.Containers[0].Image; img != "my-registry/sandbox-image:v2" {
			t.Errorf("sandbox %s: image %s, want my-registry/sandbox-image:v2", n, img)
		}
	}
	list := kubectl(t, "", "get", "sandbox", "-n", ns, "-l", poolLabel+"=my-sandbox-pool", "--no-headers")
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if f := strings.Fields(line); len(f) < 2 || f[1] != "Running" {
			t.Errorf("kubectl get sandbox line %q: want status Running", line)
		}
	}
}

// TestSeedPatchExample applies seed 001's patch (image update, add volume3
// and its mount, delete volume2 and its mount) and checks each new pod spec.
func TestSeedPatchExample(t *testing.T) {
	s := Stack(t)
	ctx := context.Background()
	ns := s.env.Namespace(t)
	names := makeSandboxes(t, s, ns, "vol", 2, "patch-pool", func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.Template.Spec.Containers = []corev1.Container{{
			Name: "test-container", Image: "mirrors-ssl.aliyuncs.com/centos:7",
			VolumeMounts: []corev1.VolumeMount{{Name: "volume1", MountPath: "/mnt/volume1"}, {Name: "volume2", MountPath: "/mnt/volume2"}},
		}}
		sb.Spec.Template.Spec.Volumes = []corev1.Volume{
			{Name: "volume1", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "volume2", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}
	})
	// The seed's excerpt has no metadata; give it a name and a selector,
	// and keep its patch verbatim.
	manifest := strings.Replace(seed(t, "001-02-sandboxupdateops-noname.yaml"), "spec:\n",
		"metadata:\n  name: patch-demo\nspec:\n  selector:\n    matchLabels:\n      "+poolLabel+": patch-pool\n", 1)
	kubectl(t, manifest, "apply", "-n", ns, "-f", "-")
	waitOps(t, s, ns, "patch-demo", agentsv1alpha1.SandboxUpdateOpsCompleted, 2*time.Minute)
	for _, n := range names {
		pod, err := s.env.Kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := pod.Spec.Containers[0]
		if c.Image != "mirrors-ssl.aliyuncs.com/centos:8" {
			t.Errorf("%s: image %s", n, c.Image)
		}
		var mounts, vols []string
		for _, m := range c.VolumeMounts {
			mounts = append(mounts, m.Name+":"+m.MountPath)
		}
		for _, v := range pod.Spec.Volumes {
			vols = append(vols, v.Name)
		}
		if got := strings.Join(mounts, ","); got != "volume3:/mnt/volume3,volume1:/mnt/volume1" {
			t.Errorf("%s: mounts %s", n, got)
		}
		if got := strings.Join(vols, ","); got != "volume3,volume1" {
			t.Errorf("%s: volumes %s", n, got)
		}
	}
}
