package selector

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	listers "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// quiet is how long a test watches that nothing more is admitted.
const quiet = 3 * time.Second

func TestAdmitsInNameOrderWithinMaxUnavailable(t *testing.T) {
	f := newFixture(t)
	for i := range 5 {
		f.sandbox(fmt.Sprintf("sbx-%d", i), oldImage, agentsv1alpha1.SandboxRunning, nil)
	}
	f.startSelector()
	ops := f.ops("upgrade", 2, newImage, nil)

	f.waitClaimed("upgrade", "sbx-0", "sbx-1")
	f.waitRequested("sbx-0", "sbx-1")
	f.waitFinalizer("upgrade")
	testenv.Consistently(t, quiet, "two sandboxes claimed", func() (bool, error) {
		got, err := f.claimed("upgrade")
		return err == nil && len(got) == 2, fmt.Errorf("claimed %v, err %v", got, err)
	})
	for _, ev := range f.events.all() {
		if ev.Data.Ops.Name != "upgrade" || ev.Data.Ops.UID != ops.UID || ev.Data.Attempt != string(ops.UID) || ev.Source != Source {
			t.Errorf("event %+v: want ops upgrade/%s, attempt %s, source %s", ev.Data, ops.UID, ops.UID, Source)
		}
		if sb := f.getSandbox(ev.Data.Sandbox.Name); ev.Data.Sandbox.UID != sb.UID || ev.Data.Sandbox.Namespace != f.ns {
			t.Errorf("event names sandbox %+v, want uid %s in %s", ev.Data.Sandbox, sb.UID, f.ns)
		}
		f.checkClaimedAt(ev)
	}

	// statusagg would record these two as upgraded: the next two start.
	f.finish("sbx-0", ops, agentsv1alpha1.UpgradingReasonSucceeded)
	f.finish("sbx-1", ops, agentsv1alpha1.UpgradingReasonSucceeded)
	f.waitClaimed("upgrade", "sbx-0", "sbx-1", "sbx-2", "sbx-3")
	f.waitRequested("sbx-0", "sbx-1", "sbx-2", "sbx-3")

	// Only one replica admits: this one holds the Lease.
	lease, err := testenv.Get(t).Kube.CoordinationV1().Leases(f.ns).Get(context.Background(), LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get lease %s: %v", LeaseName, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("lease %s has no holder", LeaseName)
	}
}

func TestFailedUsesBudgetAndIsLabelled(t *testing.T) {
	f := newFixture(t)
	for i := range 3 {
		f.sandbox(fmt.Sprintf("sbx-%d", i), oldImage, agentsv1alpha1.SandboxRunning, nil)
	}
	f.startSelector()
	ops := f.ops("upgrade", 1, newImage, nil)
	f.waitClaimed("upgrade", "sbx-0")

	f.finish("sbx-0", ops, agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	testenv.Eventually(t, 30*time.Second, "sbx-0 labelled upgrade-failed=true", func() (bool, error) {
		v := f.getSandbox("sbx-0").Labels[agentsv1alpha1.LabelUpgradeFailed]
		return v == "true", fmt.Errorf("label = %q", v)
	})
	testenv.Consistently(t, quiet, "the failure holds the only slot", func() (bool, error) {
		got, err := f.claimed("upgrade")
		return err == nil && slices.Equal(got, []string{"sbx-0"}), fmt.Errorf("claimed %v, err %v", got, err)
	})
	f.waitRequested("sbx-0")

	// A retried attempt that succeeds clears the label and frees the slot.
	f.finish("sbx-0", ops, agentsv1alpha1.UpgradingReasonSucceeded)
	testenv.Eventually(t, 30*time.Second, "upgrade-failed removed from sbx-0", func() (bool, error) {
		v, ok := f.getSandbox("sbx-0").Labels[agentsv1alpha1.LabelUpgradeFailed]
		return !ok, fmt.Errorf("label = %q", v)
	})
	f.waitClaimed("upgrade", "sbx-0", "sbx-1")
}

func TestPausedOpsAdmitsNothingUntilResumed(t *testing.T) {
	f := newFixture(t)
	for i := range 2 {
		f.sandbox(fmt.Sprintf("sbx-%d", i), oldImage, agentsv1alpha1.SandboxRunning, nil)
	}
	f.startSelector()
	f.ops("upgrade", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) { o.Spec.Paused = true })
	f.waitFinalizer("upgrade")
	testenv.Consistently(t, quiet, "nothing claimed while paused", func() (bool, error) {
		got, err := f.claimed("upgrade")
		return err == nil && len(got) == 0, fmt.Errorf("claimed %v, err %v", got, err)
	})

	f.updateOps("upgrade", false, func(o *agentsv1alpha1.SandboxUpdateOps) { o.Spec.Paused = false })
	f.waitClaimed("upgrade", "sbx-0")
	f.waitRequested("sbx-0")
}

// An ops created paused has its patch checked all the same, so one that
// cannot work says so before anyone resumes it; nothing is claimed.
func TestPausedOpsHasItsPatchChecked(t *testing.T) {
	f := newFixture(t)
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.startSelector()
	f.ops("typo", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Paused = true
		o.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"main","imagee":"registry.example/agent:v2"}]}}`)
	})
	testenv.Eventually(t, 30*time.Second, "the paused ops's patch check recorded", func() (bool, error) {
		o, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(context.Background(), "typo", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		problem := upgrade.PatchProblem(o)
		return strings.Contains(problem, "imagee"), fmt.Errorf("patch problem %q", problem)
	})
	if got, err := f.claimed("typo"); err != nil || len(got) != 0 {
		t.Errorf("claimed %v (err %v) under a paused ops with a patch that cannot work", got, err)
	}
}

func TestSecondOpsWaitsForTheActiveOne(t *testing.T) {
	f := newFixture(t)
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, map[string]string{"group": "a"})
	f.sandbox("sbx-1", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.startSelector()
	first := f.ops("first", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Selector.MatchLabels["group"] = "a"
	})
	f.waitClaimed("first", "sbx-0")
	f.ops("second", 1, "registry.example/agent:v3", nil)
	f.waitFinalizer("second")
	testenv.Consistently(t, quiet, "second admits nothing while first is active", func() (bool, error) {
		got, err := f.claimed("second")
		return err == nil && len(got) == 0, fmt.Errorf("claimed %v, err %v", got, err)
	})

	// statusagg would end the first ops; the second starts by itself.
	f.finish("sbx-0", first, agentsv1alpha1.UpgradingReasonSucceeded)
	f.updateOps("first", true, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Status.Phase = agentsv1alpha1.SandboxUpdateOpsCompleted
	})
	f.waitClaimed("second", "sbx-0")
	f.waitRequested("sbx-0", "sbx-0")
}

func TestDeletingOpsReleasesItsSandboxes(t *testing.T) {
	f := newFixture(t)
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.sandbox("sbx-1", oldImage, agentsv1alpha1.SandboxPaused, nil)
	f.startSelector()
	ops := f.ops("upgrade", 2, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.StateFilter = &agentsv1alpha1.UpgradeStateFilter{
			States: []agentsv1alpha1.SandboxPhase{agentsv1alpha1.SandboxRunning, agentsv1alpha1.SandboxPaused},
		}
	})
	f.waitClaimed("upgrade", "sbx-0", "sbx-1")
	for _, name := range []string{"sbx-0", "sbx-1"} {
		if v, want := f.getSandbox(name).Annotations[upgrade.AnnotationClaim], upgrade.ClaimValue(ops.Name, string(ops.UID)); v != want {
			t.Errorf("%s: annotation %s = %q, want %q", name, upgrade.AnnotationClaim, v, want)
		}
	}
	if v := f.getSandbox("sbx-1").Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger]; v != "true" {
		t.Errorf("paused sbx-1: annotation %s = %q, want true", agentsv1alpha1.AnnotationUpgradeResumeTrigger, v)
	}

	err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Delete(context.Background(), "upgrade", metav1.DeleteOptions{})
	if err != nil {
		t.Fatalf("delete ops: %v", err)
	}
	f.waitOpsGone("upgrade")
	for _, name := range []string{"sbx-0", "sbx-1"} {
		sb := f.getSandbox(name)
		if v, ok := sb.Labels[agentsv1alpha1.LabelUpdateOps]; ok {
			t.Errorf("%s still labelled %s=%s", name, agentsv1alpha1.LabelUpdateOps, v)
		}
		for _, mark := range []string{agentsv1alpha1.AnnotationUpgradeResumeTrigger, upgrade.AnnotationClaim} {
			if v, ok := sb.Annotations[mark]; ok {
				t.Errorf("%s still annotated %s=%s", name, mark, v)
			}
		}
	}
}

func TestSkipsUpToDateAndFilteredSandboxes(t *testing.T) {
	f := newFixture(t)
	f.sandbox("sbx-0", newImage, agentsv1alpha1.SandboxRunning, nil)   // already patched
	f.sandbox("sbx-1", oldImage, agentsv1alpha1.SandboxPaused, nil)    // outside the default filter
	f.sandbox("sbx-2", oldImage, agentsv1alpha1.SandboxRunning, nil)   // to upgrade
	f.sandbox("sbx-3", oldImage, agentsv1alpha1.SandboxSucceeded, nil) // finished
	f.sandbox("other", oldImage, agentsv1alpha1.SandboxRunning, nil)   // also to upgrade
	f.startSelector()
	f.ops("upgrade", 5, newImage, nil)

	f.waitClaimed("upgrade", "other", "sbx-2")
	testenv.Consistently(t, quiet, "only sandboxes that need the upgrade are claimed", func() (bool, error) {
		got, err := f.claimed("upgrade")
		return err == nil && slices.Equal(got, []string{"other", "sbx-2"}), fmt.Errorf("claimed %v, err %v", got, err)
	})
	f.waitRequested("other", "sbx-2")
}

func TestRepublishesRequestedAfterRestart(t *testing.T) {
	f := newFixture(t)
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.sandbox("sbx-1", oldImage, agentsv1alpha1.SandboxRunning, nil)
	// A selector crashed after labelling sbx-0 and before publishing.
	f.ops("upgrade", 2, newImage, nil)
	sb := f.getSandbox("sbx-0")
	sb.Labels[agentsv1alpha1.LabelUpdateOps] = "upgrade"
	if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Update(context.Background(), sb, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("label sbx-0: %v", err)
	}

	f.startSelector()
	f.waitClaimed("upgrade", "sbx-0", "sbx-1")
	testenv.Eventually(t, 30*time.Second, "requested for sbx-0 and sbx-1", func() (bool, error) {
		got, err := f.events.sandboxes()
		slices.Sort(got)
		return err == nil && slices.Equal(got, []string{"sbx-0", "sbx-1"}), fmt.Errorf("requested %v, err %v", got, err)
	})
	for _, ev := range f.events.all() {
		f.checkClaimedAt(ev) // the republished sbx-0's version comes from the cache
	}
}

// The patch check does not stop at a first candidate whose own pod is refused even
// without the patch (it says nothing about the patch): it checks the next one, and a
// patch the API server refuses for it fails the ops before any sandbox is claimed.
func TestPatchCheckLooksPastAnUnusualFirstSandbox(t *testing.T) {
	f := newFixture(t)
	f.sandbox("a-odd", oldImage, agentsv1alpha1.SandboxRunning, nil)
	// a-odd's own template mounts a volume it does not define: its pod is refused as it is.
	updated, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Get(context.Background(), "a-odd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	updated.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "missing", MountPath: "/m"}}
	if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Update(context.Background(), updated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.sandbox("b-good", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.startSelector()
	f.ops("bad-mount", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"main","volumeMounts":[{"name":"nope","mountPath":"/x"}]}]}}`)}
	})
	testenv.Eventually(t, 30*time.Second, "the patch check refuses the patch", func() (bool, error) {
		ops, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(context.Background(), "bad-mount", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v, ok := ops.Annotations[upgrade.AnnotationPatchCheck]
		return ok && strings.Contains(v, "checked on sandbox b-good"), fmt.Errorf("patch check %q (recorded %v)", v, ok)
	})
	if got, err := f.claimed("bad-mount"); err != nil || len(got) != 0 {
		t.Fatalf("claimed %v (err %v), want none", got, err)
	}
}

// An image the kubelet cannot parse passes the API server's dry run; the patch check
// refuses it all the same, before any sandbox is claimed (its old pod would be deleted
// for a new one stuck in InvalidImageName).
func TestPatchCheckRefusesAnImageTheKubeletCannotParse(t *testing.T) {
	f := newFixture(t)
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.startSelector()
	f.ops("bad-image", 1, "My-Registry/Sandbox:V2", nil)
	testenv.Eventually(t, 30*time.Second, "the patch check refuses the image", func() (bool, error) {
		ops, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(context.Background(), "bad-image", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v, ok := ops.Annotations[upgrade.AnnotationPatchCheck]
		return ok && strings.Contains(v, `image "My-Registry/Sandbox:V2" is not a valid image reference`) && strings.Contains(v, "no sandbox was touched"), fmt.Errorf("patch check %q (recorded %v)", v, ok)
	})
	if got, err := f.claimed("bad-image"); err != nil || len(got) != 0 {
		t.Fatalf("claimed %v (err %v), want none", got, err)
	}
}

// A patch whose container has no name (the guide's patch with the name left out) fails
// the ops with InvalidPatch before any sandbox is claimed: strategic merge cannot place
// it in any sandbox's containers.
func TestPatchCheckRefusesAContainerWithoutItsName(t *testing.T) {
	f := newFixture(t)
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.startSelector()
	f.ops("no-name", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"image":"` + newImage + `"}]}}`)}
	})
	testenv.Eventually(t, 30*time.Second, "the patch check refuses the patch", func() (bool, error) {
		ops, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(context.Background(), "no-name", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v, ok := ops.Annotations[upgrade.AnnotationPatchCheck]
		return ok && strings.Contains(v, "does not contain declared merge key: name") && strings.Contains(v, "no sandbox was touched"), fmt.Errorf("patch check %q (recorded %v)", v, ok)
	})
	if got, err := f.claimed("no-name"); err != nil || len(got) != 0 {
		t.Fatalf("claimed %v (err %v), want none", got, err)
	}
}

// A patch changed after the check, in a way the CRD's immutability rule does not see (a
// key the schema does not declare swapped for another), admits nothing more: the digest
// recorded with the check no longer matches, and upgrade.PatchProblem says so.
func TestPatchChangedAfterItsCheckAdmitsNothingMore(t *testing.T) {
	f := newFixture(t)
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.sandbox("sbx-1", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.startSelector()
	ops := f.ops("swap", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"hostname":"checked","containers":[{"name":"main","image":"` + newImage + `"}]}}`)}
	})
	f.waitClaimed("swap", "sbx-0")
	f.updateOps("swap", false, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"subdomain":"swapped","containers":[{"name":"main","image":"` + newImage + `"}]}}`)}
	})
	got, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(context.Background(), "swap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if problem := upgrade.PatchProblem(got); !strings.Contains(problem, "spec.patch was changed after the selector checked it") {
		t.Fatalf("PatchProblem after the swap = %q (annotations %v)", problem, got.Annotations)
	}
	f.finish("sbx-0", ops, agentsv1alpha1.UpgradingReasonSucceeded)
	testenv.Consistently(t, quiet, "sbx-1 is not admitted under the changed patch", func() (bool, error) {
		claimed, err := f.claimed("swap")
		return err == nil && slices.Equal(claimed, []string{"sbx-0"}), fmt.Errorf("claimed %v, err %v", claimed, err)
	})
}

// Deleting an ops after the patcher wrote a sandbox's template but before statusagg
// recorded the attempt does not strand the sandbox with the new template on its old
// pod: it keeps its claim (and the ops its finalizer) until the attempt ends.
func TestDeletingOpsKeepsASandboxItAlreadyPatched(t *testing.T) {
	f := newFixture(t)
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.sandbox("sbx-1", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.startSelector()
	ops := f.ops("upgrade", 2, newImage, nil)
	f.waitClaimed("upgrade", "sbx-0", "sbx-1")
	// The patcher's write on sbx-0; statusagg records nothing yet.
	sb := f.getSandbox("sbx-0")
	sb.Spec.Template.Spec.Containers[0].Image = newImage
	if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Update(context.Background(), sb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Delete(context.Background(), "upgrade", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete ops: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, "sbx-1, never patched, released", func() (bool, error) {
		got, err := f.claimed("upgrade")
		return err == nil && slices.Equal(got, []string{"sbx-0"}), fmt.Errorf("claimed %v, err %v", got, err)
	})
	testenv.Consistently(t, quiet, "sbx-0 keeps its claim while its attempt is not recorded", func() (bool, error) {
		got, err := f.claimed("upgrade")
		return err == nil && slices.Equal(got, []string{"sbx-0"}), fmt.Errorf("claimed %v, err %v", got, err)
	})
	// statusagg records the attempt and it ends: the ops goes.
	f.finish("sbx-0", ops, agentsv1alpha1.UpgradingReasonSucceeded)
	f.waitOpsGone("upgrade")
	if v, ok := f.getSandbox("sbx-0").Labels[agentsv1alpha1.LabelUpdateOps]; ok {
		t.Errorf("sbx-0 still labelled %s=%s", agentsv1alpha1.LabelUpdateOps, v)
	}
}

// An ops being deleted waits for its sandboxes in a stage, but not for one that is being
// deleted itself: nothing drives that stage any more, and a sandbox held in Terminating
// by someone else's finalizer would hold the ops, and its namespace, for as long.
func TestDeletingOpsDoesNotWaitForASandboxBeingDeleted(t *testing.T) {
	f := newFixture(t)
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	f.startSelector()
	ops := f.ops("upgrade", 1, newImage, nil)
	f.waitClaimed("upgrade", "sbx-0")
	f.finish("sbx-0", ops, agentsv1alpha1.UpgradingReasonPreUpgrade) // in a stage
	client := f.agents.AgentsV1alpha1().Sandboxes(f.ns)
	hold := []byte(`{"metadata":{"finalizers":["molt.dev/test-hold"]}}`)
	if _, err := client.Patch(context.Background(), "sbx-0", types.MergePatchType, hold, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = client.Patch(context.Background(), "sbx-0", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := client.Delete(context.Background(), "sbx-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Delete(context.Background(), "upgrade", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete ops: %v", err)
	}
	f.waitOpsGone("upgrade")
}

// The wake-up mark follows the attempt the admitting ops starts, not the one
// an earlier ops left: a paused sandbox whose failed attempt already replaced
// its pod is not woken (the woken pod would be backed up over the good
// backup), and one whose preUpgrade failed is (its backup was never taken).
func TestAdmissionSetsTheWakeMarkForThisAttempt(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, name := range []string{"sbx-0", "sbx-1"} {
		f.sandbox(name, oldImage, agentsv1alpha1.SandboxPaused, nil)
		if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("pause %s: %v", name, err)
		}
	}
	f.startSelector()
	withPaused := func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.StateFilter = &agentsv1alpha1.UpgradeStateFilter{States: []agentsv1alpha1.SandboxPhase{agentsv1alpha1.SandboxPaused}}
	}
	first := f.ops("first", 2, newImage, withPaused)
	f.waitClaimed("first", "sbx-0", "sbx-1")
	for _, name := range []string{"sbx-0", "sbx-1"} {
		if v := f.getSandbox(name).Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger]; v != "true" {
			t.Fatalf("paused %s admitted by first: annotation %s = %q, want true", name, agentsv1alpha1.AnnotationUpgradeResumeTrigger, v)
		}
	}
	// first fails both and stays (not deleted, so release leaves its marks).
	f.finish("sbx-0", first, agentsv1alpha1.UpgradingReasonUpgradePodFailed)
	f.finish("sbx-1", first, agentsv1alpha1.UpgradingReasonPreUpgradeFailed)
	f.updateOps("first", true, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Status.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
	})
	// The patcher kept each one's template from before first's patch
	// (upgrade.AnnotationOriginalTemplate).
	original := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`,
		upgrade.AnnotationOriginalTemplate, `{"spec":{"containers":[{"name":"sandbox","image":"`+oldImage+`"}]}}`,
		upgrade.AnnotationOriginalTemplateFor, string(first.UID))
	for _, name := range []string{"sbx-0", "sbx-1"} {
		if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Patch(ctx, name, types.MergePatchType, []byte(original), metav1.PatchOptions{}); err != nil {
			t.Fatalf("keep the original template of %s: %v", name, err)
		}
	}

	second := f.ops("second", 2, newImage, withPaused)
	f.waitClaimed("second", "sbx-0", "sbx-1")
	// sbx-1 was never backed up: the original template is kept for second,
	// whose pods are built from it until its preUpgrade succeeds. sbx-0's
	// backup was taken: its copy goes.
	if sb := f.getSandbox("sbx-1"); sb.Annotations[upgrade.AnnotationOriginalTemplateFor] != string(second.UID) || sb.Annotations[upgrade.AnnotationOriginalTemplate] == "" {
		t.Errorf("sbx-1 (failed in PreUpgrade) resumed by second: original template kept for %q (%d bytes), want it kept for second (%s)",
			sb.Annotations[upgrade.AnnotationOriginalTemplateFor], len(sb.Annotations[upgrade.AnnotationOriginalTemplate]), second.UID)
	}
	for _, key := range []string{upgrade.AnnotationOriginalTemplate, upgrade.AnnotationOriginalTemplateFor} {
		if v, ok := f.getSandbox("sbx-0").Annotations[key]; ok {
			t.Errorf("sbx-0 (failed in UpgradePod) resumed by second: annotation %s = %q, want none: its backup was taken", key, v)
		}
	}
	if v, ok := f.getSandbox("sbx-0").Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger]; ok {
		t.Errorf("sbx-0 (failed in UpgradePod) resumed by second: annotation %s = %q, want none: its resume builds the new pod", agentsv1alpha1.AnnotationUpgradeResumeTrigger, v)
	}
	if v := f.getSandbox("sbx-1").Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger]; v != "true" {
		t.Errorf("sbx-1 (failed in PreUpgrade) resumed by second: annotation %s = %q, want true: its backup is still to take", agentsv1alpha1.AnnotationUpgradeResumeTrigger, v)
	}
}

// A sandbox whose attempt failed while its ops was being deleted, before
// the failure label was synced, is released with upgrade-failed=true: a
// retry ops selecting on it must find it.
func TestReleaseMarksASandboxThatFailedMeanwhile(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, map[string]string{agentsv1alpha1.LabelUpdateOps: "upgrade"})
	ops := f.ops("upgrade", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Finalizers = []string{agentsv1alpha1.FinalizerSandboxUpdateOpsProtection}
	})
	f.finish("sbx-0", ops, agentsv1alpha1.UpgradingReasonPreUpgradeFailed)
	client := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns)
	if err := client.Delete(ctx, ops.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleting, err := client.Get(ctx, ops.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	s := &Selector{client: f.agents, sandboxLister: listers.NewSandboxLister(indexer), inflight: newInflight(), republishAfter: DefaultRepublishAfter}
	if err := s.release(ctx, deleting); err != nil {
		t.Fatalf("release: %v", err)
	}
	sb := f.getSandbox("sbx-0")
	if _, ok := sb.Labels[agentsv1alpha1.LabelUpdateOps]; ok || sb.Labels[agentsv1alpha1.LabelUpgradeFailed] != "true" {
		t.Errorf("released sandbox labels %v, want no %s and %s=true", sb.Labels, agentsv1alpha1.LabelUpdateOps, agentsv1alpha1.LabelUpgradeFailed)
	}
}

// A patch whose pod asks for more than the namespace's ResourceQuota has left fails the
// ops before any sandbox is claimed, and the message says it is the quota and what to
// do (raise it, or ask for less), not only that the patch is invalid.
func TestPatchCheckNamesTheQuotaAPatchedPodExceeds(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sb := f.sandbox("sbx-0", oldImage, agentsv1alpha1.SandboxRunning, nil)
	sb.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	if _, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Update(ctx, sb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Get(t).SetQuota(t, f.ns, "cpu",
		corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("1")},
		corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("100m")})
	f.startSelector()
	f.ops("big", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"main","image":"` + newImage + `","resources":{"requests":{"cpu":"2"}}}]}}`)}
	})
	testenv.Eventually(t, 30*time.Second, "the patch check names the quota", func() (bool, error) {
		ops, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v := ops.Annotations[upgrade.AnnotationPatchCheck]
		return strings.Contains(v, "exceeded quota") && strings.Contains(v, "raise the quota") &&
			strings.Contains(v, "kubectl describe resourcequota -n "+f.ns), fmt.Errorf("patch check %q", v)
	})
	if got, err := f.claimed("big"); err != nil || len(got) != 0 {
		t.Fatalf("claimed %v (err %v), want none", got, err)
	}
}

// A patch that adds a container with a new tag of its image, under a name a letter or
// two from the template's container, pauses the ops before its first
// sandbox, saying which; resumed by the user, it goes on and is not paused
// again (the new container is meant).
func TestMisspeltContainerPausesTheOpsBeforeItsFirstSandbox(t *testing.T) {
	f := newFixture(t)
	for i := range 2 {
		f.sandbox(fmt.Sprintf("sbx-%d", i), oldImage, agentsv1alpha1.SandboxRunning, nil)
	}
	f.startSelector()
	f.ops("typo", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"mian","image":"` + newImage + `"}]}}`)
	})
	f.waitPausedBy("typo", upgrade.AnnotationMisspeltContainer, upgrade.AnnotationMisspeltPausedAt, "containers/mian (1 edit from containers/main)")
	f.resumeAndWaitClaimed("typo", "sbx-0")
}

// An ops created from a copy of one molt paused for sandboxes without a
// backup (`kubectl get -o yaml`, edited, applied again after a delete)
// carries that pause's annotations: it is paused all the same, as its own
// pause has not happened. Before, the copied annotation said "paused once
// already", and the copy started the sandboxes with no backup at once.
func TestACopiedOpsWithoutBackupIsPausedAgain(t *testing.T) {
	f := newFixture(t)
	for i := range 2 {
		f.sandbox(fmt.Sprintf("sbx-%d", i), oldImage, agentsv1alpha1.SandboxRunning, nil)
	}
	f.startSelector()
	f.ops("restore-only", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Annotations = map[string]string{
			upgrade.AnnotationNoBackup:         "sbx-0, sbx-1",
			upgrade.AnnotationNoBackupPausedAt: "2 3f7c1b8e-0000-4000-8000-000000000001", // the deleted original's
		}
		o.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PostUpgrade: &agentsv1alpha1.UpgradeAction{
			Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/sh", "-c", "cp -a /backup/. /workspace/"}}}}
	})
	testenv.Eventually(t, 30*time.Second, "the copy paused for sandboxes without a backup", func() (bool, error) {
		o, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(context.Background(), "restore-only", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got, err := f.claimed("restore-only"); err != nil || len(got) != 0 {
			return false, fmt.Errorf("claimed %v (err %v) with no pause of its own", got, err)
		}
		at := o.Annotations[upgrade.AnnotationNoBackupPausedAt]
		return o.Spec.Paused && at == strconv.FormatInt(o.Generation, 10)+" "+string(o.UID),
			fmt.Errorf("paused %v, paused-at %q (generation %d, uid %s)", o.Spec.Paused, at, o.Generation, o.UID)
	})
	if got, err := f.claimed("restore-only"); err != nil || len(got) != 0 {
		t.Fatalf("claimed %v (err %v) while paused, want none", got, err)
	}
}

// An ops with a postUpgrade but no preUpgrade, whose sandboxes have no backup
// (never upgraded with one), is paused before its first sandbox, naming them;
// once resumed it goes on and is not paused for it again.
func TestOpsWithoutBackupPausesBeforeItsFirstSandbox(t *testing.T) {
	f := newFixture(t)
	for i := range 2 {
		f.sandbox(fmt.Sprintf("sbx-%d", i), oldImage, agentsv1alpha1.SandboxRunning, nil)
	}
	f.startSelector()
	f.ops("restore-only", 1, newImage, func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PostUpgrade: &agentsv1alpha1.UpgradeAction{
			Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/sh", "-c", "cp -a /backup/. /workspace/"}}}}
	})
	f.waitPausedBy("restore-only", upgrade.AnnotationNoBackup, upgrade.AnnotationNoBackupPausedAt, "sbx-0, sbx-1")
	f.resumeAndWaitClaimed("restore-only", "sbx-0")
}

// An ops whose preUpgrade and postUpgrade back up to a path on no volume that
// outlives the pod (seed 000's /mnt/shared on sandboxes without storage
// there) is paused before its first sandbox, naming the paths and the
// sandbox: a walk saw every workspace lost with the ops Completed while only
// a warning said why. Resumed by the user (the hooks keep the backup
// elsewhere), it goes on and is not paused for it again. (With a volume at
// the path it is not paused: e2e TestSeedUpgradeWithBackup.)
func TestBackupOffVolumePausesTheOpsBeforeItsFirstSandbox(t *testing.T) {
	f := newFixture(t)
	for i := range 2 {
		f.sandbox(fmt.Sprintf("sbx-%d", i), oldImage, agentsv1alpha1.SandboxRunning, nil)
	}
	f.startSelector()
	hooks := func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{
			PreUpgrade: &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/bash", "-c",
				"tar czf /mnt/shared/backup-$(hostname).tar.gz -C /home/user/workspace .\necho done"}}},
			PostUpgrade: &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/bash", "-c",
				"tar xzf /mnt/shared/backup-$(hostname).tar.gz -C /home/user/workspace"}}},
		}
	}
	f.ops("offvol", 1, newImage, hooks)
	f.waitPausedBy("offvol", upgrade.AnnotationBackupOffVolume, upgrade.AnnotationBackupOffVolumePausedAt, "/mnt/shared, /home/user/workspace (sandbox sbx-0)")
	f.resumeAndWaitClaimed("offvol", "sbx-0")
}
