package selector

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

func hookOf(script string) *agentsv1alpha1.SandboxLifecycle {
	return &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{
		Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/sh", "-c", script}}, TimeoutSeconds: 30}}
}

// asPatched gives sandbox name what the patcher writes when an ops with
// written replaces its own hooks (own): written in spec.lifecycle, own kept
// in upgrade.AnnotationOwnLifecycle, and labels.
func (f *fixture) asPatched(name string, own, written *agentsv1alpha1.SandboxLifecycle, labels map[string]string) {
	f.t.Helper()
	ctx := context.Background()
	client := f.agents.AgentsV1alpha1().Sandboxes(f.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sb, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		sb.Spec.Lifecycle = own
		sb.Annotations = map[string]string{upgrade.AnnotationOwnLifecycle: upgrade.KeepOwnLifecycle(sb, written)}
		sb.Spec.Lifecycle = written
		if sb.Labels == nil {
			sb.Labels = map[string]string{}
		}
		for k, v := range labels {
			sb.Labels[k] = v
		}
		_, err = client.Update(ctx, sb, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		f.t.Fatalf("write an ops's hooks into sandbox %s: %v", name, err)
	}
}

// waitLifecycle waits until sandbox name has want in spec.lifecycle and no
// upgrade.AnnotationOwnLifecycle.
func (f *fixture) waitLifecycle(name string, want *agentsv1alpha1.SandboxLifecycle) {
	f.t.Helper()
	testenv.Eventually(f.t, 30*time.Second, "own hooks of "+name+" back", func() (bool, error) {
		sb := f.getSandbox(name)
		_, kept := sb.Annotations[upgrade.AnnotationOwnLifecycle]
		return !kept && equality.Semantic.DeepEqual(sb.Spec.Lifecycle, want), fmt.Errorf("lifecycle %+v, annotation kept %v", sb.Spec.Lifecycle, kept)
	})
}

// A sandbox's own hooks, which an ops's took the place of, come back once
// that ops is done with it: not while the ops runs, nor while its attempt
// failed (the ops that resumes it restores with the hooks that backed it
// up); a spec.lifecycle someone changed since stays theirs. Before, the
// ops's hooks stayed for good, and the sandbox's later direct upgrades ran
// them (a walk lost a workspace so).
func TestOwnHooksComeBackOnceTheOpsIsDone(t *testing.T) {
	f := newFixture(t)
	own, opsHooks, edited := hookOf("tar czf /b/own.tgz -C /ws ."), hookOf("echo ops"), hookOf("echo edited")
	held := f.ops("held", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Selector.MatchLabels = map[string]string{"none": "none"}
	})
	done := f.ops("done", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Selector.MatchLabels = map[string]string{"none": "none"}
		o.Spec.Paused = true
	})
	f.updateOps("done", true, func(o *agentsv1alpha1.SandboxUpdateOps) { o.Status.Phase = agentsv1alpha1.SandboxUpdateOpsCompleted })

	for _, n := range []string{"back", "none", "edited", "running", "failed"} {
		f.sandbox(n, oldImage, agentsv1alpha1.SandboxRunning, map[string]string{"pool": "none"})
	}
	f.asPatched("back", own, opsHooks, map[string]string{agentsv1alpha1.LabelUpdateOps: "done"})
	f.finish("back", done, agentsv1alpha1.UpgradingReasonSucceeded)
	f.updateSandbox("none", func(sb *agentsv1alpha1.Sandbox) {
		sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
	})
	f.asPatched("none", nil, opsHooks, nil) // no hooks of its own, and spec.upgradePolicy: none is kept
	f.asPatched("edited", own, opsHooks, nil)
	f.asPatched("running", own, opsHooks, map[string]string{agentsv1alpha1.LabelUpdateOps: "held"})
	f.finish("running", held, agentsv1alpha1.UpgradingReasonSucceeded)
	f.asPatched("failed", own, opsHooks, map[string]string{agentsv1alpha1.LabelUpdateOps: "done"})
	f.finish("failed", done, agentsv1alpha1.UpgradingReasonPostUpgradeFailed)
	f.updateSandbox("edited", func(sb *agentsv1alpha1.Sandbox) { sb.Spec.Lifecycle = edited })

	f.startSelector()
	f.waitLifecycle("back", own)
	f.waitLifecycle("none", nil)
	f.waitLifecycle("edited", edited)
	for _, n := range []string{"running", "failed"} {
		if sb := f.getSandbox(n); !equality.Semantic.DeepEqual(sb.Spec.Lifecycle, opsHooks) || sb.Annotations[upgrade.AnnotationOwnLifecycle] == "" {
			t.Errorf("%s: lifecycle %+v, annotations %v; want the ops's hooks kept, the own ones still kept aside", n, sb.Spec.Lifecycle, sb.Annotations)
		}
	}
	// The ops that holds "running" ends: its own hooks come back.
	f.updateOps("held", true, func(o *agentsv1alpha1.SandboxUpdateOps) { o.Status.Phase = agentsv1alpha1.SandboxUpdateOpsCompleted })
	f.waitLifecycle("running", own)
	// The failed one's resume succeeds: its own hooks come back too.
	f.finish("failed", done, agentsv1alpha1.UpgradingReasonSucceeded)
	f.waitLifecycle("failed", own)
}

// updateSandbox applies mutate to the current sandbox, retrying on conflict.
func (f *fixture) updateSandbox(name string, mutate func(*agentsv1alpha1.Sandbox)) {
	f.t.Helper()
	ctx := context.Background()
	client := f.agents.AgentsV1alpha1().Sandboxes(f.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sb, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(sb)
		_, err = client.Update(ctx, sb, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		f.t.Fatalf("update sandbox %s: %v", name, err)
	}
}

// A direct attempt this selector requested whose record the status showed
// only between two looks (an ops upgraded the sandbox next, and its attempt
// is what the status shows now) holds nothing back: the sandbox's own hooks
// come back once that ops is done. Before, the memory of the direct attempt
// was kept, as never recorded, and held back the return of the own hooks for
// good, so the next direct upgrade ran the ops's hooks (a walk lost a
// workspace so).
func TestOwnHooksComeBackAfterAnOpsThatFollowedADirectUpgrade(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	env := testenv.Get(t)
	own, opsHooks := hookOf("tar czf /b/own.tgz -C /ws ."), hookOf("echo ops")
	done := f.ops("done", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Selector.MatchLabels = map[string]string{"none": "none"}
		o.Spec.Paused = true
	})
	f.updateOps("done", true, func(o *agentsv1alpha1.SandboxUpdateOps) { o.Status.Phase = agentsv1alpha1.SandboxUpdateOpsCompleted })
	sb := f.directSandbox("sbx")
	f.updateSandbox("sbx", func(sb *agentsv1alpha1.Sandbox) { sb.Spec.Lifecycle = own })
	f.startSelector()
	f.editImage("sbx", newImage)
	f.waitRequested("sbx")

	// The direct attempt ran and ended, then the ops upgraded the sandbox:
	// its pod runs the template, the ops's hooks stand in for its own.
	cur := f.getSandbox("sbx")
	revision, err := upgrade.Revision(cur.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	mark := []byte(`{"metadata":{"labels":{"` + agentsv1alpha1.LabelPodTemplateHash + `":"` + revision + `"}}}`)
	if _, err := env.Kube.CoreV1().Pods(f.ns).Patch(ctx, "sbx", types.MergePatchType, mark, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.asPatched("sbx", own, opsHooks, map[string]string{agentsv1alpha1.LabelUpdateOps: "done"})
	f.updateSandbox("sbx", func(sb *agentsv1alpha1.Sandbox) {
		sb.Annotations[upgrade.AnnotationClaim] = "done " + string(done.UID)
	})
	f.publishRequested(sb, string(done.UID))
	f.finish("sbx", done, agentsv1alpha1.UpgradingReasonSucceeded)
	f.waitLifecycle(sb.Name, own)
}

// The restore's patch holds only on the sandbox as read: on one changed
// since, the API server answers Conflict (told apart from a refusal without
// a read), and writes nothing.
func TestOwnLifecyclePatchNeedsTheSandboxAsRead(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	own, opsHooks := hookOf("own"), hookOf("ops")
	f.sandbox("stale", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.asPatched("stale", own, opsHooks, nil)
	read := f.getSandbox("stale")
	f.updateSandbox("stale", func(sb *agentsv1alpha1.Sandbox) { sb.Labels["touched"] = "yes" })
	restore := func(sb *agentsv1alpha1.Sandbox) error {
		body, err := ownLifecyclePatch(sb, own, true)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.agents.AgentsV1alpha1().Sandboxes(f.ns).Patch(ctx, "stale", types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}
	if err := restore(read); !apierrors.IsConflict(err) {
		t.Fatalf("patch of a sandbox changed since read: %v, want Conflict", err)
	}
	if sb := f.getSandbox("stale"); !equality.Semantic.DeepEqual(sb.Spec.Lifecycle, opsHooks) || sb.Annotations[upgrade.AnnotationOwnLifecycle] == "" {
		t.Errorf("the refused patch wrote: lifecycle %+v, annotations %v", sb.Spec.Lifecycle, sb.Annotations)
	}
	read = f.getSandbox("stale")
	if err := restore(read); err != nil {
		t.Fatalf("patch of the sandbox as read: %v", err)
	}
	f.waitLifecycle("stale", own)
	// The copy read before that restore (a cache not caught up yet) meets
	// a Conflict too, not an Invalid patch that would pass for a refusal.
	if err := restore(read); !apierrors.IsConflict(err) {
		t.Errorf("restore again from the copy read before the restore: %v, want Conflict", err)
	}
}

// The merge patch of spec.lifecycle leaves exactly the sandbox's own hooks:
// an ops's hook, or a field of one, that the own hooks lack is removed, not
// merged beside them.
func TestLifecycleMergePatchLeavesOnlyTheOwnHooks(t *testing.T) {
	exec := func(cmd string) *agentsv1alpha1.UpgradeAction {
		return &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"sh", "-c", cmd}}}
	}
	opsHooks := &agentsv1alpha1.SandboxLifecycle{PreUpgrade: exec("ops backup"), PostUpgrade: exec("ops restore")}
	opsHooks.PreUpgrade.TimeoutSeconds = 30
	for _, own := range []*agentsv1alpha1.SandboxLifecycle{
		{PostUpgrade: exec("own restore")},
		{PreUpgrade: exec("own backup"), PostUpgrade: exec("own restore")},
		nil,
	} {
		patch, err := lifecycleMergePatch(opsHooks, own)
		if err != nil {
			t.Fatal(err)
		}
		from, err := json.Marshal(agentsv1alpha1.SandboxSpec{Lifecycle: opsHooks})
		if err != nil {
			t.Fatal(err)
		}
		merged, err := jsonpatch.MergePatch(from, []byte(`{"lifecycle":`+string(patch)+`}`))
		if err != nil {
			t.Fatal(err)
		}
		var got agentsv1alpha1.SandboxSpec
		if err := json.Unmarshal(merged, &got); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got.Lifecycle, own) {
			t.Errorf("merge patch %s made lifecycle %s, want %+v", patch, merged, own)
		}
	}
}
