package devruntime_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/devruntime"
	"molt.dev/dev/testenv"
	"molt.dev/pkg/agentruntime"
)

func TestMain(m *testing.M) {
	devruntime.MaybeRunInit()
	testenv.Main(m)
}

func TestViewOf(t *testing.T) {
	pod := func(uid string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sbx", UID: k8stypes.UID("uid-" + uid)},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{
					{Name: "main", VolumeMounts: []corev1.VolumeMount{
						{Name: "workspace", MountPath: "/home/user/workspace"},
						{Name: "shared", MountPath: "/mnt/shared"},
						{Name: "data", MountPath: "/data", SubPath: "a/b"},
						{Name: "csi", MountPath: "/csi"},
						{Name: "config", MountPath: "/etc/app"},
					}},
					{Name: "sidecar", VolumeMounts: []corev1.VolumeMount{
						{Name: "workspace", MountPath: "/mnt/shared"}, // taken by main
						{Name: "scratch", MountPath: "/scratch"},
					}},
				},
				Volumes: []corev1.Volume{
					{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "shared", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim"}}},
					{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/data"}}},
					{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "nas.csi.example", VolumeAttributes: map[string]string{"path": "/x"}}}},
					{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
				},
			},
		}
	}
	a, b := devruntime.ViewOf("/state", pod("a")), devruntime.ViewOf("/state", pod("b"))
	if a.Root != "/state/pods/uid-a/root" || a.Hostname != "sbx" {
		t.Errorf("root %q hostname %q", a.Root, a.Hostname)
	}
	targets := map[string]string{}
	for _, m := range a.Mounts {
		targets[m.Target] = m.Source
	}
	want := map[string]string{
		"/home/user/workspace": "/state/pods/uid-a/volumes/workspace",
		"/scratch":             "/state/pods/uid-a/volumes/scratch",
		"/mnt/shared":          "/state/volumes/ns/pvc/claim",
		"/data":                "/state/volumes/ns/hostpath/var_data",
	}
	for target, source := range want {
		if targets[target] != source {
			t.Errorf("mount at %s from %q, want %q", target, targets[target], source)
		}
	}
	for _, m := range a.Mounts {
		if want := map[string]string{"/data": "a/b"}[m.Target]; m.SubPath != want {
			t.Errorf("mount at %s has subPath %q, want %q", m.Target, m.SubPath, want)
		}
	}
	if !strings.HasPrefix(targets["/csi"], "/state/volumes/ns/csi/nas.csi.example-") {
		t.Errorf("csi volume from %q", targets["/csi"])
	}
	if _, ok := targets["/etc/app"]; ok || len(a.Mounts) != 5 {
		t.Errorf("mounts = %+v, want 5 without the configMap", a.Mounts)
	}
	if a.Mounts[len(a.Mounts)-1].Target != "/home/user/workspace" {
		t.Errorf("deepest mount is not last: %+v", a.Mounts)
	}
	// Only what outlives the pod is the same for a recreated pod.
	for i := range a.Mounts {
		shared := strings.HasPrefix(a.Mounts[i].Source, "/state/volumes/")
		if same := reflect.DeepEqual(a.Mounts[i], b.Mounts[i]); same != shared {
			t.Errorf("mount %+v of a recreated pod: same=%v, want %v", a.Mounts[i], same, shared)
		}
	}
}

// TestCommandsSeeTheView runs commands in a view without Kubernetes: the
// pod's root, its volumes and its hostname.
func TestCommandsSeeTheView(t *testing.T) {
	state := t.TempDir()
	shared := filepath.Join(state, "shared")
	view := devruntime.View{
		Root:     filepath.Join(state, "root"),
		Hostname: "my-pod",
		Mounts:   []devruntime.Mount{{Source: shared, Target: "/mnt/shared"}},
	}
	url := serve(t, devruntime.Target{View: view})
	run := func(script string) agentruntime.Result {
		t.Helper()
		res, err := agentruntime.Exec(context.Background(), agentruntime.ExecRequest{BaseURL: url, Command: []string{"/bin/bash", "-c", script}, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("Exec %q: %v", script, err)
		}
		if !res.Succeeded() {
			t.Fatalf("Exec %q: %s", script, res.FailureMessage())
		}
		return res
	}
	res := run("hostname; pwd; echo $HOME; mkdir -p /home/user/workspace; echo hi > /home/user/workspace/f; echo s > /mnt/shared/g; echo t > /tmp/h; " +
		"tar czf /mnt/shared/b.tgz -C /home/user/workspace . && echo packed")
	if want := "my-pod\n/root\n/root\npacked\n"; res.Stdout != want {
		t.Errorf("stdout = %q, want %q", res.Stdout, want)
	}
	for path, want := range map[string]string{
		filepath.Join(view.Root, "home/user/workspace/f"): "hi\n",
		filepath.Join(view.Root, "tmp/h"):                 "t\n",
		filepath.Join(shared, "g"):                        "s\n",
	} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := os.Stat("/mnt/shared/g"); err == nil {
		t.Errorf("/mnt/shared/g was written on the host")
	}
	if host, _ := os.Hostname(); host == "my-pod" {
		t.Errorf("the host's name changed")
	}
	// A second command sees what the first left.
	if res := run("cat /home/user/workspace/f /tmp/h"); res.Stdout != "hi\nt\n" {
		t.Errorf("second command read %q", res.Stdout)
	}
}
