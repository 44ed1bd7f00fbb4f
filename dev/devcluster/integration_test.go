package devcluster_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// kubectl runs bin/kubectl against the test cluster with stdin.
func kubectl(t *testing.T, env *testenv.Env, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.RootDir, "bin", "kubectl"), append([]string{"--kubeconfig=" + env.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestPodIsScheduledOntoKwokNodeAndRuns(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()

	if out, err := kubectl(t, env, `
apiVersion: agents.kruise.io/v1alpha1
kind: Sandbox
metadata:
  name: box-1
spec:
  template:
    spec:
      containers:
      - name: main
        image: registry.example.com/agent:v1
`, "apply", "-n", ns, "-f", "-"); err != nil {
		t.Fatalf("kubectl apply sandbox: %v\n%s", err, out)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "box-1", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example.com/agent:v1"}}},
	}
	if _, err := env.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	testenv.Eventually(t, 60*time.Second, "pod scheduled onto a kwok node and Running", func() (bool, error) {
		p, err := env.Kube.CoreV1().Pods(ns).Get(ctx, "box-1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !strings.HasPrefix(p.Spec.NodeName, "kwok-node-") {
			return false, nil
		}
		return p.Status.Phase == corev1.PodRunning && podReady(p) && p.Status.PodIP != "", nil
	})

	// A graceful delete is finished by the node agent with a UID
	// precondition; a newer pod of the same name survives.
	old, err := env.Kube.CoreV1().Pods(ns).Get(ctx, "box-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Kube.CoreV1().Pods(ns).Delete(ctx, "box-1", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, "old pod gone", func() (bool, error) {
		_, err := env.Kube.CoreV1().Pods(ns).Get(ctx, "box-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	pod.ResourceVersion = ""
	created, err := env.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("recreate pod: %v", err)
	}
	if created.UID == old.UID {
		t.Fatalf("recreated pod has the old UID %s", old.UID)
	}
	testenv.Eventually(t, 60*time.Second, "recreated pod Running", func() (bool, error) {
		p, err := env.Kube.CoreV1().Pods(ns).Get(ctx, "box-1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.UID != created.UID {
			t.Fatalf("pod was replaced: uid %s, want %s", p.UID, created.UID)
		}
		return p.Status.Phase == corev1.PodRunning && podReady(p), nil
	})

	// Deleting the namespace completes (kube-controller-manager's namespace
	// controller empties it, the node agent finishes pod deletions).
	if err := env.Kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace: %v", err)
	}
	testenv.Eventually(t, 90*time.Second, "namespace "+ns+" deleted", func() (bool, error) {
		_, err := env.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

func TestImageRulesOfTheLocalKubelet(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	cases := []struct {
		name, image, reason string
		init                bool // the image is an init container's
		never               bool // restartPolicy Never: the pod ends Failed
	}{
		{name: "pull-failed", image: "registry.example.com/agent:non-existent", reason: "ImagePullBackOff"},
		{name: "crash", image: "registry.example.com/agent:crash", reason: "CrashLoopBackOff"},
		{name: "init-pull-failed", image: "registry.example.com/agent:non-existent", reason: "ImagePullBackOff", init: true},
		{name: "init-crash", image: "registry.example.com/agent:crash", reason: "CrashLoopBackOff", init: true},
		{name: "init-crash-never", image: "registry.example.com/agent:crash", init: true, never: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: ns},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: tc.image}}},
			}
			if tc.init {
				pod.Spec.Containers[0].Image = "registry.example.com/agent:v1"
				pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: tc.image}}
			}
			if tc.never {
				pod.Spec.RestartPolicy = corev1.RestartPolicyNever
			}
			if _, err := env.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create pod: %v", err)
			}
			what := "container waiting with " + tc.reason
			if tc.never {
				what = "pod Failed with its init container terminated"
			}
			testenv.Eventually(t, 60*time.Second, what, func() (bool, error) {
				p, err := env.Kube.CoreV1().Pods(ns).Get(ctx, tc.name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if podReady(p) {
					t.Fatalf("pod with image %s became Ready", tc.image)
				}
				statuses := p.Status.ContainerStatuses
				if tc.init {
					statuses = p.Status.InitContainerStatuses
					if p.Status.Phase == corev1.PodRunning {
						t.Fatalf("pod with init image %s is Running", tc.image)
					}
				}
				for _, cs := range statuses {
					if tc.never && cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0 {
						return p.Status.Phase == corev1.PodFailed, fmt.Errorf("phase %s", p.Status.Phase)
					}
					if cs.State.Waiting != nil && cs.State.Waiting.Reason == tc.reason && tc.reason != "" {
						if cs.State.Waiting.Message == "" {
							t.Fatalf("%s without a message", tc.reason)
						}
						return true, nil
					}
				}
				return false, fmt.Errorf("statuses %+v", statuses)
			})
		})
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
