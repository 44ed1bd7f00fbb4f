package devruntime_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"molt.dev/dev/devcluster"
	"molt.dev/dev/devruntime"
	"molt.dev/dev/testenv"
	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/generated/clientset/versioned"
)

// Seeds whose hooks must run unchanged: they back a directory up to a
// persistent volume before the old pod goes, and restore it in the new one.
const (
	seedWithBackup = "test/seeds/manifests/000-02-sandboxupdateops-upgrade-with-backup.yaml"
	seedOpenclaw   = "test/seeds/manifests/001-01-sandboxupdateops-upgrade-demo.yaml"
)

// TestPodFilesAcrossRecreate serves a sandbox's pod on its kwok IP, then
// deletes and recreates the pod: files of the workspace and the pod's root
// are gone, the persistent volume keeps its files, and the seed's backup
// and restore hooks run verbatim across the recreate.
func TestPodFilesAcrossRecreate(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	agents, err := versioned.NewForConfig(env.RestConfig)
	if err != nil {
		t.Fatalf("build agents client: %v", err)
	}
	hooks := seedHooks(t, filepath.Join(env.RootDir, seedWithBackup))
	stateDir := t.TempDir()
	// Not the agent-runtime's port: test packages run side by side, each
	// with a cluster handing out the same pod IPs.
	port := freePort(t)
	startServe(t, devruntime.Config{Kube: env.Kube, Agents: agents, StateDir: stateDir, Port: port, Keepalive: time.Second})

	sb, err := agents.AgentsV1alpha1().Sandboxes(ns).Create(ctx, &agentsv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "sbx", Namespace: ns, Annotations: map[string]string{
			agentsv1alpha1.AnnotationRuntimeAccessToken: "tok-1",
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	volumes := podVolumes{"/mnt/shared": claim(sb.Name + "-shared"), "/home/user/workspace": emptyDir()}
	oldPod := createPod(t, env, sb, volumes)
	run := runner(t, env, ns, sb.Name, port)

	// The sandbox's pod is found as hookrunner finds it.
	url, token, err := devruntime.SandboxEndpoint(ctx, env.Kube, agents, ns, sb.Name)
	if want := "http://" + oldPod.Status.PodIP + ":49983"; err != nil || url != want || token != "tok-1" {
		t.Errorf("SandboxEndpoint = %q, %q, %v; want %q, tok-1", url, token, err, want)
	}
	// The token of the sandbox is required.
	url = "http://" + net.JoinHostPort(oldPod.Status.PodIP, strconv.Itoa(port))
	testenv.Eventually(t, 30*time.Second, "agent-runtime refuses a call without the token", func() (bool, error) {
		_, err := agentruntime.Exec(ctx, agentruntime.ExecRequest{BaseURL: url, Command: []string{"true"}, Timeout: 10 * time.Second})
		return errors.Is(err, agentruntime.ErrUnauthenticated), err
	})

	if got := run("hostname; echo work > /home/user/workspace/note.txt; echo keep > /mnt/shared/keep.txt; echo mine > /root/scratch.txt"); got != "sbx\n" {
		t.Errorf("hostname printed %q, want the pod name", got)
	}
	if got := run(hooks.PreUpgrade.Exec.Command...); got != "Backup completed\n" {
		t.Errorf("preUpgrade printed %q", got)
	}

	if err := env.Kube.CoreV1().Pods(ns).Delete(ctx, oldPod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	testenv.Eventually(t, time.Minute, "old pod gone", func() (bool, error) {
		_, err := env.Kube.CoreV1().Pods(ns).Get(ctx, oldPod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	newPod := createPod(t, env, sb, volumes)
	if newPod.UID == oldPod.UID {
		t.Fatalf("recreated pod has the old UID %s", oldPod.UID)
	}
	testenv.Eventually(t, 30*time.Second, "old pod's root removed", func() (bool, error) {
		_, err := os.Stat(filepath.Join(stateDir, "pods", string(oldPod.UID)))
		return errors.Is(err, os.ErrNotExist), err
	})

	want := "sbx\nworkspace empty\nroot empty\nkeep\nbackup-sbx.tar.gz\nkeep.txt\n"
	if got := run("hostname; ls -A /home/user/workspace | grep -q . || echo workspace empty; test -e /root/scratch.txt || echo root empty; cat /mnt/shared/keep.txt; ls /mnt/shared"); got != want {
		t.Errorf("new pod sees %q, want %q", got, want)
	}
	if got := run(hooks.PostUpgrade.Exec.Command...); got != "Restore completed\n" {
		t.Errorf("postUpgrade printed %q", got)
	}
	if got, want := run("cat /home/user/workspace/note.txt; ls /mnt/shared"), "work\nkeep.txt\n"; got != want {
		t.Errorf("after the restore: %q, want %q (workspace restored, backup removed)", got, want)
	}
}

// TestSandboxWithoutTokenRefusesEveryCall serves the pod of a sandbox that
// has no runtime-access-token annotation: every call is refused, and
// SandboxEndpoint says why. Once the sandbox has a token, only that token
// is accepted.
func TestSandboxWithoutTokenRefusesEveryCall(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	agents, err := versioned.NewForConfig(env.RestConfig)
	if err != nil {
		t.Fatalf("build agents client: %v", err)
	}
	port := freePort(t)
	startServe(t, devruntime.Config{Kube: env.Kube, Agents: agents, StateDir: t.TempDir(), Port: port})
	sb, err := agents.AgentsV1alpha1().Sandboxes(ns).Create(ctx, &agentsv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "open", Namespace: ns},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	pod := createPod(t, env, sb, nil)
	url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))
	call := func(token string) error {
		_, err := agentruntime.Exec(ctx, agentruntime.ExecRequest{BaseURL: url, AccessToken: token, Command: []string{"true"}, Timeout: 10 * time.Second})
		return err
	}
	testenv.Eventually(t, 30*time.Second, "agent-runtime refuses a call without a token", func() (bool, error) {
		err := call("")
		return errors.Is(err, agentruntime.ErrUnauthenticated), err
	})
	if err := call("guess"); !errors.Is(err, agentruntime.ErrUnauthenticated) {
		t.Errorf("call with a guessed token: %v; want it refused", err)
	}
	if _, _, err := devruntime.SandboxEndpoint(ctx, env.Kube, agents, ns, sb.Name); err == nil || !strings.Contains(err.Error(), agentsv1alpha1.AnnotationRuntimeAccessToken) {
		t.Errorf("SandboxEndpoint of a sandbox without a token: %v; want an error naming the annotation", err)
	}

	patch := []byte(`{"metadata":{"annotations":{"` + agentsv1alpha1.AnnotationRuntimeAccessToken + `":"tok-2"}}}`)
	if _, err := agents.AgentsV1alpha1().Sandboxes(ns).Patch(ctx, sb.Name, k8stypes.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate sandbox: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, "agent-runtime accepts the sandbox's new token", func() (bool, error) {
		err := call("tok-2")
		return err == nil, err
	})
	for _, token := range []string{"", "tok-1", "tok-22"} {
		if err := call(token); !errors.Is(err, agentruntime.ErrUnauthenticated) {
			t.Errorf("call with token %q: %v; want it refused", token, err)
		}
	}
}

// TestOpenclawSeedHooksAcrossRecreate runs the openclaw seed's hooks
// verbatim: the state in /root/.openclaw (private to the pod) goes through
// a backup volume at /backup into the recreated pod.
func TestOpenclawSeedHooksAcrossRecreate(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	agents, err := versioned.NewForConfig(env.RestConfig)
	if err != nil {
		t.Fatalf("build agents client: %v", err)
	}
	hooks := seedHooks(t, filepath.Join(env.RootDir, seedOpenclaw))
	port := freePort(t)
	startServe(t, devruntime.Config{Kube: env.Kube, Agents: agents, StateDir: t.TempDir(), Port: port})
	sb, err := agents.AgentsV1alpha1().Sandboxes(ns).Create(ctx, &agentsv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "openclaw", Namespace: ns, Annotations: map[string]string{
			agentsv1alpha1.AnnotationRuntimeAccessToken: "tok-1",
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	volumes := podVolumes{"/backup": claim("openclaw-backup")}
	oldPod := createPod(t, env, sb, volumes)
	run := runner(t, env, ns, sb.Name, port)

	run("mkdir -p /root/.openclaw && echo '{\"v\":1}' > /root/.openclaw/state.json")
	if got := run(hooks.PreUpgrade.Exec.Command...); got != "preUpgrade success\n" {
		t.Errorf("preUpgrade printed %q", got)
	}
	if err := env.Kube.CoreV1().Pods(ns).Delete(ctx, oldPod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	testenv.Eventually(t, time.Minute, "old pod gone", func() (bool, error) {
		_, err := env.Kube.CoreV1().Pods(ns).Get(ctx, oldPod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	createPod(t, env, sb, volumes)
	if got := run("test -e /root/.openclaw || echo no state"); got != "no state\n" {
		t.Errorf("recreated pod: %q, want its root without the old state", got)
	}
	run(hooks.PostUpgrade.Exec.Command...)
	if got, want := run("cat /root/.openclaw/state.json; ls -A /root; ls /backup"), "{\"v\":1}\n.openclaw\nopenclaw-state-v1.tgz\n"; got != want {
		t.Errorf("after the restore: %q, want %q", got, want)
	}
}

func seedHooks(t *testing.T, path string) *agentsv1alpha1.SandboxLifecycle {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read seed: %v", err)
	}
	var ops agentsv1alpha1.SandboxUpdateOps
	if err := yaml.UnmarshalStrict(raw, &ops); err != nil {
		t.Fatalf("decode seed %s: %v", path, err)
	}
	lc := ops.Spec.Lifecycle
	if lc == nil || lc.PreUpgrade == nil || lc.PostUpgrade == nil {
		t.Fatalf("seed %s has no preUpgrade and postUpgrade hooks", path)
	}
	return lc
}

// startServe runs Serve until the test ends.
func startServe(t *testing.T, cfg devruntime.Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- devruntime.Serve(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Serve: %v", err)
		}
	})
}

// podVolumes are a pod's volumes by mount path.
type podVolumes map[string]corev1.VolumeSource

func claim(name string) corev1.VolumeSource {
	return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}
}

func emptyDir() corev1.VolumeSource {
	return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
}

// createPod creates the pod of sb (as podcycler builds it: named after the
// sandbox and controlled by it) with volumes, bound to a kwok node (a claim
// needs no binding then), and waits until it runs with an IP.
func createPod(t *testing.T, env *testenv.Env, sb *agentsv1alpha1.Sandbox, volumes podVolumes) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var mounts []corev1.VolumeMount
	var vols []corev1.Volume
	for path, source := range volumes {
		name := fmt.Sprintf("vol-%d", len(vols))
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: path})
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: source})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: sb.Name, Namespace: sb.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, agentsv1alpha1.SchemeGroupVersion.WithKind("Sandbox"))},
		},
		Spec: corev1.PodSpec{
			NodeName:   devcluster.NodeName(0),
			Containers: []corev1.Container{{Name: "sandbox", Image: "my-registry/sandbox-image:v1", VolumeMounts: mounts}},
			Volumes:    vols,
		},
	}
	created, err := env.Kube.CoreV1().Pods(sb.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	testenv.Eventually(t, time.Minute, "pod running with an IP", func() (bool, error) {
		p, err := env.Kube.CoreV1().Pods(sb.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		created = p
		return p.UID == created.UID && devruntime.Serves(p), nil
	})
	return created
}

// runner returns a function that runs a command (a bash script when given
// one string) in the sandbox's pod through the protocol on port, with the
// sandbox's token, and returns its stdout; it fails the test unless the
// command succeeds. It waits for the pod's agent-runtime to answer.
func runner(t *testing.T, env *testenv.Env, ns, name string, port int) func(command ...string) string {
	return func(command ...string) string {
		t.Helper()
		if len(command) == 1 {
			command = []string{"/bin/bash", "-c", command[0]}
		}
		var res agentruntime.Result
		testenv.Eventually(t, 30*time.Second, "agent-runtime of sandbox "+name+" answers", func() (bool, error) {
			pod, err := env.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			res, err = agentruntime.Exec(context.Background(), agentruntime.ExecRequest{
				BaseURL:     "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)),
				AccessToken: "tok-1", Command: command, Timeout: 30 * time.Second,
			})
			return !errors.Is(err, agentruntime.ErrUnreachable), err
		})
		if !res.Succeeded() {
			t.Fatalf("%s: %s", strings.Join(command, " "), res.FailureMessage())
		}
		return res.Stdout
	}
}
