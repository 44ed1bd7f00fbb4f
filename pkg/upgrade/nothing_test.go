package upgrade

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// TestNothingSelectedTellsATypoFromDone: an ops that selects nothing says which
// rule left the sandboxes out, so a selector typo does not read as "already done".
func TestNothingSelectedTellsATypoFromDone(t *testing.T) {
	box := func(name string, labels map[string]string, phase agentsv1alpha1.SandboxPhase, image string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}
		sb.Status.Phase = phase
		return sb
	}
	pool := map[string]string{"agents.kruise.io/sandbox-template": "my-sandbox-pool"}
	ops := func(selector map[string]string) *agentsv1alpha1.SandboxUpdateOps {
		o := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns"}}
		o.Spec.Selector = &metav1.LabelSelector{MatchLabels: selector}
		o.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v2"}]}}`)}
		return o
	}
	sandboxes := []*agentsv1alpha1.Sandbox{
		box("a", pool, agentsv1alpha1.SandboxRunning, "img:v1"),
		box("b", pool, agentsv1alpha1.SandboxRunning, "img:v2"),
		box("c", pool, agentsv1alpha1.SandboxPaused, "img:v1"),
		box("d", pool, agentsv1alpha1.SandboxPaused, "img:v1"),
	}
	for _, tc := range []struct {
		name      string
		ops       *agentsv1alpha1.SandboxUpdateOps
		sandboxes []*agentsv1alpha1.Sandbox
		want      string
	}{{
		name:      "selector typo",
		ops:       ops(map[string]string{"agents.kruise.io/sandbox-templte": "my-sandbox-pool"}),
		sandboxes: sandboxes,
		want: "no sandbox was selected: of the 4 sandboxes in namespace ns, 4 do not match spec.selector " +
			"(agents.kruise.io/sandbox-templte=my-sandbox-pool); `kubectl molt plan -f <ops file>` lists each sandbox with why",
	}, {
		name:      "state filter and done",
		ops:       ops(pool),
		sandboxes: sandboxes[1:],
		want: "no selected sandbox needs this patch: of the 3 sandboxes in namespace ns, 2 are in a phase spec.stateFilter leaves out (Paused: 2), " +
			"1 already has the patched template; `kubectl molt plan -f <ops file>` lists each sandbox with why",
	}, {
		name:      "applied twice",
		ops:       ops(pool),
		sandboxes: sandboxes[1:2],
		want:      "no sandbox needs this patch: of the 1 sandbox in namespace ns, 1 already has the patched template",
	}, {
		name: "empty namespace",
		ops:  ops(pool),
		want: "no sandbox was selected: namespace ns has no sandbox (an ops selects only in its own namespace)",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := Select(tc.ops, tc.sandboxes, nil)
			if err != nil {
				t.Fatal(err)
			}
			if sel.Total() != 0 {
				t.Fatalf("candidates = %d, want none", sel.Total())
			}
			if got := NothingSelected("ns", sel); got != tc.want {
				t.Errorf("NothingSelected =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}

// An ops that completes says how many sandboxes its selector matches that its
// stateFilter leaves out (a Paused one, or those an edit of the filter
// dropped mid-run): "all N updated" alone hides them.
func TestLeftOutByStateFilter(t *testing.T) {
	box := func(name string, phase agentsv1alpha1.SandboxPhase, labels map[string]string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
		sb.Status.Phase = phase
		return sb
	}
	pool := map[string]string{"app": "ws"}
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns"}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: pool}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v2"}]}}`)}
	ops.Spec.StateFilter = &agentsv1alpha1.UpgradeStateFilter{States: []agentsv1alpha1.SandboxPhase{agentsv1alpha1.SandboxPaused}}
	sandboxes := []*agentsv1alpha1.Sandbox{
		box("a", agentsv1alpha1.SandboxPaused, pool),
		box("b", agentsv1alpha1.SandboxRunning, pool),
		box("c", agentsv1alpha1.SandboxRunning, pool),
		box("other", agentsv1alpha1.SandboxRunning, map[string]string{"app": "db"}),
	}
	for _, tc := range []struct {
		name      string
		sandboxes []*agentsv1alpha1.Sandbox
		want      string
	}{
		{"two left out", sandboxes, "2 sandboxes that match spec.selector are in a phase spec.stateFilter leaves out (Running: 2) and were not upgraded"},
		{"one left out", sandboxes[:2], "1 sandbox that matches spec.selector is in a phase spec.stateFilter leaves out (Running: 1) and was not upgraded"},
		{"none left out (another selector's do not count)", []*agentsv1alpha1.Sandbox{sandboxes[0], sandboxes[3]}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := Select(ops, tc.sandboxes, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := LeftOutByStateFilter(sel); got != tc.want {
				t.Errorf("LeftOutByStateFilter =\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
}

// Sandboxes created with the ops (one apply) have no phase yet, or are
// Pending: the ops waits for them, bounded by SettleWait, before it
// completes; ones that are Paused, or Pending for longer, are left out.
func TestStarting(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	box := func(name string, phase agentsv1alpha1.SandboxPhase, age time.Duration) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "ws"}, CreationTimestamp: metav1.NewTime(now.Add(-age))}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
		sb.Status.Phase = phase
		return sb
	}
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns"}}
	ops.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ws"}}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v2"}]}}`)}
	ops.CreationTimestamp = metav1.NewTime(now.Add(-time.Second))
	longAgo := now.Add(-time.Hour) // statusagg has worked for an hour
	for _, tc := range []struct {
		name      string
		sandboxes []*agentsv1alpha1.Sandbox
		seenSince time.Time
		n         int
		wait      time.Duration
	}{
		{"no phase yet, just created", []*agentsv1alpha1.Sandbox{box("a", "", time.Second)}, longAgo, 1, SettleWait - time.Second},
		{"pending, just created", []*agentsv1alpha1.Sandbox{box("a", agentsv1alpha1.SandboxPending, 10*time.Second)}, longAgo, 1, SettleWait - 10*time.Second},
		{"pending for long", []*agentsv1alpha1.Sandbox{box("a", agentsv1alpha1.SandboxPending, 2*SettleWait)}, longAgo, 0, 0},
		{"no phase, created long ago, statusagg just started", []*agentsv1alpha1.Sandbox{box("a", "", time.Hour)}, now.Add(-5 * time.Second), 1, SettleWait - 5*time.Second},
		{"no phase, created long ago, statusagg long at work", []*agentsv1alpha1.Sandbox{box("a", "", time.Hour)}, longAgo, 0, 0},
		{"paused", []*agentsv1alpha1.Sandbox{box("a", agentsv1alpha1.SandboxPaused, time.Second)}, longAgo, 0, 0},
		{"running is selected, not waited for", []*agentsv1alpha1.Sandbox{box("a", agentsv1alpha1.SandboxRunning, time.Second)}, longAgo, 0, 0},
		{"created after the ops was (a platform creates them all day)", []*agentsv1alpha1.Sandbox{box("a", agentsv1alpha1.SandboxPending, -30*time.Second)}, longAgo, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := Select(ops, tc.sandboxes, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, n, wait := Starting(ops, sel, now, tc.seenSince)
			if n != tc.n || wait != tc.wait {
				t.Errorf("Starting = %d, %s; want %d, %s", n, wait, tc.n, tc.wait)
			}
		})
	}
	// A stateFilter without Running would not select them once they run.
	paused := ops.DeepCopy()
	paused.Spec.StateFilter = &agentsv1alpha1.UpgradeStateFilter{States: []agentsv1alpha1.SandboxPhase{agentsv1alpha1.SandboxPaused}}
	sel, err := Select(paused, []*agentsv1alpha1.Sandbox{box("a", agentsv1alpha1.SandboxPending, time.Second)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, n, _ := Starting(paused, sel, now, longAgo); n != 0 {
		t.Errorf("stateFilter [Paused]: %d waited for, want none", n)
	}
}
