package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	agentsinformers "molt.dev/pkg/generated/informers/externalversions"
)

const poolLabel = "agents.kruise.io/sandbox-template"

// kubectl runs bin/kubectl against the test cluster.
func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	env := testenv.Get(t)
	cmd := exec.Command(filepath.Join(env.RootDir, "bin", "kubectl"), append([]string{"--kubeconfig=" + env.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// seed returns a seed manifest verbatim.
func seed(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Get(t).RootDir, "test", "seeds", "manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// makeSandboxes creates n sandboxes named <prefix>-NN with one container
// "sandbox" and waits until every one is Running.
func makeSandboxes(t *testing.T, s *stack, ns, prefix string, n int, pool string, mutate func(*agentsv1alpha1.Sandbox)) []string {
	t.Helper()
	ctx := context.Background()
	var names []string
	for i := 0; i < n; i++ {
		sb := &agentsv1alpha1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", prefix, i), Namespace: ns, Labels: map[string]string{poolLabel: pool}},
		}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "my-registry/sandbox-image:v1"}}}}
		if mutate != nil {
			mutate(sb)
		}
		if _, err := s.agents.AgentsV1alpha1().Sandboxes(ns).Create(ctx, sb, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create sandbox %s: %v", sb.Name, err)
		}
		names = append(names, sb.Name)
	}
	testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("%d sandboxes Running", n), func() (bool, error) {
		// Only these: the namespace may hold Running sandboxes of an earlier call.
		list, err := s.agents.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running := 0
		for _, sb := range list.Items {
			if slices.Contains(names, sb.Name) && sb.Status.Phase == agentsv1alpha1.SandboxRunning {
				running++
			}
		}
		return running >= n, fmt.Errorf("%d of %d Running", running, n)
	})
	return names
}

// watcher records, from informers (every event, no sampling), how many
// sandboxes were upgrading (phase Upgrading or Resuming) at once and every
// pod created, with when it was seen.
type watcher struct {
	mu           sync.Mutex
	upgrading    map[string]bool
	maxUpgrading int
	sawUpgrading map[string]bool
	podAdds      map[string][]string    // sandbox name -> UIDs of pods added after start
	podAddTimes  map[string][]time.Time // sandbox name -> when each of podAdds was seen
	podImages    map[string][]string    // sandbox name -> the first container's image of each of podAdds
	stop         chan struct{}
}

func watch(t *testing.T, s *stack, ns string) *watcher {
	t.Helper()
	w := &watcher{upgrading: map[string]bool{}, sawUpgrading: map[string]bool{}, podAdds: map[string][]string{}, podAddTimes: map[string][]time.Time{}, podImages: map[string][]string{}, stop: make(chan struct{})}
	af := agentsinformers.NewSharedInformerFactoryWithOptions(s.agents, 0, agentsinformers.WithNamespace(ns))
	kf := informers.NewSharedInformerFactoryWithOptions(s.env.Kube, 0, informers.WithNamespace(ns))
	sbInf := af.Agents().V1alpha1().Sandboxes().Informer()
	onSandbox := func(obj any) {
		sb, ok := obj.(*agentsv1alpha1.Sandbox)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if sb.Status.Phase == agentsv1alpha1.SandboxUpgrading || sb.Status.Phase == agentsv1alpha1.SandboxResuming {
			w.upgrading[sb.Name] = true
			w.sawUpgrading[sb.Name] = true
		} else {
			delete(w.upgrading, sb.Name)
		}
		if len(w.upgrading) > w.maxUpgrading {
			w.maxUpgrading = len(w.upgrading)
		}
	}
	_, _ = sbInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onSandbox, UpdateFunc: func(_, o any) { onSandbox(o) }})
	podInf := kf.Core().V1().Pods().Informer()
	_, _ = podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.podAdds[pod.Name] = append(w.podAdds[pod.Name], string(pod.UID))
		w.podAddTimes[pod.Name] = append(w.podAddTimes[pod.Name], time.Now())
		image := ""
		if len(pod.Spec.Containers) > 0 {
			image = pod.Spec.Containers[0].Image
		}
		w.podImages[pod.Name] = append(w.podImages[pod.Name], image)
	}})
	af.Start(w.stop)
	kf.Start(w.stop)
	if !cache.WaitForCacheSync(w.stop, sbInf.HasSynced, podInf.HasSynced) {
		t.Fatal("watcher caches did not sync")
	}
	// Pods that exist already are the old ones; count only later adds.
	w.mu.Lock()
	w.podAdds, w.podAddTimes, w.podImages = map[string][]string{}, map[string][]time.Time{}, map[string][]string{}
	w.mu.Unlock()
	t.Cleanup(func() { close(w.stop) })
	return w
}

// addTimes returns when each pod of sandbox name was seen created.
func (w *watcher) addTimes(name string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.podAddTimes[name]...)
}

// images returns the first container's image of each pod of sandbox name
// seen created, in order.
func (w *watcher) images(name string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.podImages[name]...)
}

func (w *watcher) snapshot() (maxUp int, saw map[string]bool, adds map[string][]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	saw = map[string]bool{}
	for k, v := range w.sawUpgrading {
		saw[k] = v
	}
	adds = map[string][]string{}
	for k, v := range w.podAdds {
		adds[k] = append([]string(nil), v...)
	}
	return w.maxUpgrading, saw, adds
}

// waitOps waits until the ops reaches phase and returns it.
func waitOps(t *testing.T, s *stack, ns, name string, phase agentsv1alpha1.SandboxUpdateOpsPhase, timeout time.Duration) *agentsv1alpha1.SandboxUpdateOps {
	t.Helper()
	var ops *agentsv1alpha1.SandboxUpdateOps
	testenv.Eventually(t, timeout, "ops "+name+" "+string(phase), func() (bool, error) {
		o, err := s.agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ops = o
		return o.Status.Phase == phase, fmt.Errorf("phase %q status %+v", o.Status.Phase, o.Status)
	})
	return ops
}

// readmeBlock returns the README text between <!-- name --> and
// <!-- /name -->: the part of the docs a test checks against the code.
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Get(t).RootDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start, end := strings.Index(text, "<!-- "+name+" -->"), strings.Index(text, "<!-- /"+name+" -->")
	if start < 0 || end < start {
		t.Fatalf("README.md has no <!-- %s --> block", name)
	}
	return text[start:end]
}

// tableRows returns the cells, trimmed, of every row of the markdown table
// in block that has n cells and is neither its header nor its rule.
func tableRows(block string, n int) [][]string {
	var rows [][]string
	for _, l := range strings.Split(block, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) != n || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	if len(rows) > 0 {
		rows = rows[1:] // the header
	}
	return rows
}

// listCell splits a cell "a, `b`, c" into its sorted items, backquotes
// removed.
func listCell(cell string) []string {
	var out []string
	for _, f := range strings.Split(cell, ",") {
		if f = strings.Trim(strings.TrimSpace(f), "`"); f != "" {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}
