package statusagg

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

func selection(maxUnavailable int, states ...upgrade.State) upgrade.Selection {
	sel := upgrade.Selection{MaxUnavailable: maxUnavailable}
	for i, s := range states {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sb-%02d", i)}}
		sel.Candidates = append(sel.Candidates, upgrade.Candidate{Sandbox: sb, State: s})
		switch s {
		case upgrade.Updated:
			sel.Updated++
		case upgrade.Updating:
			sel.Updating++
		case upgrade.Failed:
			sel.Failed++
		default:
			sel.NotStarted++
		}
	}
	return sel
}

func TestDesiredOpsStatus(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "ops", Generation: 2}}
	paused := ops.DeepCopy()
	paused.Spec.Paused = true
	other := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "first"}}
	alreadyPatched := upgrade.Selection{MaxUnavailable: 1, Excluded: []upgrade.Exclusion{{Sandbox: &agentsv1alpha1.Sandbox{}, Reason: upgrade.ExcludedNoNeed}}}
	wasUpdating := ops.DeepCopy() // its one started sandbox was deleted mid-upgrade
	wasUpdating.Status.Phase = agentsv1alpha1.SandboxUpdateOpsUpdating
	badSelector := ops.DeepCopy()
	badSelector.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "my app"}}
	u, f, n, d := upgrade.Updating, upgrade.Failed, upgrade.NotStarted, upgrade.Updated
	for _, tc := range []struct {
		name       string
		ops        *agentsv1alpha1.SandboxUpdateOps
		active     *agentsv1alpha1.SandboxUpdateOps
		sel        upgrade.Selection
		selErr     error
		wantPhase  agentsv1alpha1.SandboxUpdateOpsPhase
		wantCond   string
		wantReason string
	}{
		{"another active ops makes it wait", ops, other, selection(1, n), nil, "Pending", "WaitingForNamespace", agentsv1alpha1.WaitingReasonAnotherOpsActive},
		{"an unusable maxUnavailable is reported", ops, ops, upgrade.Selection{}, fmt.Errorf("spec.updateStrategy.maxUnavailable: bad"), "Pending", "Progressing", agentsv1alpha1.ProgressingReasonInvalidSpec},
		{"an invalid label selector fails the ops", badSelector, badSelector, upgrade.Selection{}, fmt.Errorf("spec.selector: bad"), "Failed", "Progressing", agentsv1alpha1.ProgressingReasonInvalidSpec},
		{"an invalid label selector fails the ops even while another is active", badSelector, other, upgrade.Selection{}, fmt.Errorf("spec.selector: bad"), "Failed", "Progressing", agentsv1alpha1.ProgressingReasonInvalidSpec},
		{"nothing to update completes", ops, ops, alreadyPatched, nil, "Completed", "Progressing", agentsv1alpha1.ProgressingReasonNothingToUpdate},
		{"nothing selected completes, saying so", ops, ops, selection(1), nil, "Completed", "Progressing", agentsv1alpha1.ProgressingReasonNothingSelected},
		{"all updated completes", ops, ops, selection(1, d, d), nil, "Completed", "Progressing", agentsv1alpha1.ProgressingReasonCompleted},
		{"upgrading", ops, ops, selection(1, d, u, n), nil, "Updating", "Progressing", agentsv1alpha1.ProgressingReasonUpdating},
		{"paused while upgrading", paused, paused, selection(1, u, n), nil, "Updating", "Progressing", agentsv1alpha1.ProgressingReasonPaused},
		{"not yet admitted", ops, ops, selection(1, n, n), nil, "Pending", "Progressing", agentsv1alpha1.ProgressingReasonUpdating},
		{"paused before its first sandbox", paused, paused, selection(1, n, n), nil, "Pending", "Progressing", agentsv1alpha1.ProgressingReasonPaused},
		{"never back to Pending once Updating", wasUpdating, wasUpdating, selection(1, n, n), nil, "Updating", "Progressing", agentsv1alpha1.ProgressingReasonUpdating},
		{"failure with budget left keeps going", ops, ops, selection(2, f, n), nil, "Updating", "Progressing", agentsv1alpha1.ProgressingReasonUpdating},
		{"failure waiting for an upgrading one", ops, ops, selection(1, f, u), nil, "Updating", "Progressing", agentsv1alpha1.ProgressingReasonUpdating},
		{"failures exhaust the budget", ops, ops, selection(1, d, f, n), nil, "Failed", "FailureBudgetExhausted", agentsv1alpha1.BudgetReasonSandboxesFailed},
		{"failures with nothing left to start", ops, ops, selection(3, d, f), nil, "Failed", "FailureBudgetExhausted", agentsv1alpha1.BudgetReasonSandboxesFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := desiredOpsStatus(tc.ops, tc.active, tc.sel, tc.selErr)
			c := meta.FindStatusCondition(st.Conditions, tc.wantCond)
			if st.Phase != tc.wantPhase || c == nil || c.Reason != tc.wantReason {
				t.Fatalf("status = %s, %s=%+v; want %s, reason %s", st.Phase, tc.wantCond, c, tc.wantPhase, tc.wantReason)
			}
			if st.Replicas != int32(tc.sel.Total()) || st.UpdatedReplicas != int32(tc.sel.Updated) ||
				st.UpdatingReplicas != int32(tc.sel.Updating) || st.FailedReplicas != int32(tc.sel.Failed) || st.ObservedGeneration != 2 {
				t.Fatalf("counters = %+v, selection %+v", st, tc.sel)
			}
		})
	}
}

func TestFailureMessageNamesUpToTen(t *testing.T) {
	states := []upgrade.State{upgrade.NotStarted, upgrade.NotStarted}
	for range 12 {
		states = append(states, upgrade.Failed)
	}
	msg := failureMessage(&agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "team"}}, selection(12, states...))
	for _, want := range []string{"12 of 14 sandboxes failed", "sb-02, sb-03", "sb-11", "and 2 more", "2 not started", "kubectl molt retry up -n team"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "sb-12") {
		t.Errorf("message %q names more than ten sandboxes", msg)
	}
}

// A patch that adds a container with no image to the failed sandboxes (their
// container is named otherwise) fails them before anything is changed, and a
// retry, which keeps the patch, fails at once: the message says to create a
// new ops instead, and names the container.
func TestFailureMessageOfAnImagelessAddSaysNotToRetry(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "team"}}
	ops.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"sandbox","env":[{"name":"A","value":"1"}]}]}}`)
	sel := selection(1, upgrade.Failed)
	sel.Candidates[0].Sandbox.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "img:v1"}}}}
	msg := failureMessage(ops, sel)
	for _, want := range []string{"adds containers/sandbox with no image to sb-00", "would fail them again before their backup", "new SandboxUpdateOps whose patch names their container"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "then `kubectl molt retry") {
		t.Errorf("message %q still sends the user to a retry", msg)
	}
	// Beside a sandbox the patch fits, failed for another cause: the way on
	// for both, and the sandbox it fits not named as imageless.
	mixed := selection(2, upgrade.Failed, upgrade.Failed)
	mixed.Candidates[0].Sandbox.Spec.Template = sel.Candidates[0].Sandbox.Spec.Template
	mixed.Candidates[1].Sandbox.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
	msg = failureMessage(ops, mixed)
	for _, want := range []string{"adds containers/sandbox with no image to sb-00,", "-n team -o jsonpath", "for the others, create a SandboxUpdateOps with this patch whose selector leaves those out"} {
		if !strings.Contains(msg, want) {
			t.Errorf("mixed: message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "no image to sb-00, sb-01") || strings.Contains(msg, "no image to sb-01") {
		t.Errorf("mixed: message %q names the sandbox the patch fits as imageless", msg)
	}
	if strings.Contains(msg, "then `kubectl molt retry") {
		t.Errorf("mixed: message %q sends the user to a retry", msg)
	}
	// The same patch on a sandbox whose container it names: the usual advice.
	sel.Candidates[0].Sandbox.Spec.Template.Spec.Containers[0].Name = "sandbox"
	if msg := failureMessage(ops, sel); !strings.Contains(msg, "then `kubectl molt retry up -n team`") {
		t.Errorf("message %q, want the retry for a sandbox the patch fits", msg)
	}
}

func TestDeletedNotes(t *testing.T) {
	var d deletedNotes
	const key, uid = "ns/ops", types.UID("ops-uid")
	d.drop(key, uid, nil) // nothing recorded yet: no panic
	d.drop(key, uid, []string{"a (PreUpgrade)"})
	d.add(key, uid, "a (PreUpgrade)")
	d.add(key, uid, "a (PreUpgrade)")
	d.add(key, uid, "b (UpgradePod)")
	notes := d.peek(key, uid)
	if len(notes) != 2 {
		t.Fatalf("peek = %v, want two notes", notes)
	}
	d.add(key, uid, "c (admitted)") // arrives between the peek and the write
	d.drop(key, uid, notes)
	if got := d.peek(key, uid); len(got) != 1 || got[0] != "c (admitted)" {
		t.Fatalf("after drop: %v, want only the note the write did not carry", got)
	}
	var st agentsv1alpha1.SandboxUpdateOpsStatus
	withDeletedNotes(&st, notes, 1)
	withDeletedNotes(&st, []string{"c (admitted)", "a (PreUpgrade)"}, 1)
	c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionSandboxesDeleted)
	if c == nil || c.Message != "3 deleted during the upgrade, 0 of them after it succeeded (still counted as updated): a (PreUpgrade), b (UpgradePod), c (admitted)" {
		t.Fatalf("SandboxesDeleted = %+v", c)
	}
}

// An updated sandbox deleted later stays counted as updated for good: the next
// success moves the count on instead of silently taking its place (rule 13).
func TestUpdatedAndDeletedStaysCounted(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}
	u, n, d := upgrade.Updating, upgrade.NotStarted, upgrade.Updated
	// Five sandboxes: s1..s4 updated, s5 updated and then deleted, s6 upgrading.
	ops.Status.UpdatedReplicas, ops.Status.Replicas = 5, 7
	withDeletedNotes(&ops.Status, []string{"s5 (Succeeded)"}, 1)
	st := desiredOpsStatus(ops, ops, selection(2, d, d, d, d, u, n), nil)
	if st.UpdatedReplicas != 5 || st.Replicas != 7 {
		t.Fatalf("before s6 ends: updated %d of %d, want 5 of 7", st.UpdatedReplicas, st.Replicas)
	}
	ops.Status = st
	st = desiredOpsStatus(ops, ops, selection(2, d, d, d, d, d, n), nil)
	if st.UpdatedReplicas != 6 || st.Replicas != 7 {
		t.Fatalf("after s6 succeeded: updated %d of %d, want 6 of 7 (s5 still counted)", st.UpdatedReplicas, st.Replicas)
	}
	// Completed, its message counts what its counters count.
	ops.Status = st
	st = desiredOpsStatus(ops, ops, selection(2, d, d, d, d, d, d), nil)
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionProgressing); st.Phase != agentsv1alpha1.SandboxUpdateOpsCompleted ||
		st.UpdatedReplicas != 7 || st.Replicas != 7 || c == nil || !strings.HasPrefix(c.Message, "all 7 sandboxes updated (1 of them deleted since") {
		t.Fatalf("completed: %s, updated %d of %d, Progressing %+v; want Completed, 7 of 7, saying all 7 with 1 deleted", st.Phase, st.UpdatedReplicas, st.Replicas, c)
	}
	// A delete statusagg did not see still never takes updated down.
	ops.Status = agentsv1alpha1.SandboxUpdateOpsStatus{UpdatedReplicas: 3, Replicas: 4}
	if st := desiredOpsStatus(ops, ops, selection(1, d, d, n), nil); st.UpdatedReplicas != 3 || st.Replicas != 4 {
		t.Fatalf("unseen delete: updated %d of %d, want 3 of 4", st.UpdatedReplicas, st.Replicas)
	}
}

// A patch naming a container the selected sandboxes' template does not have is flagged,
// once, before anything starts (the ops may still be waiting for its namespace); a patch
// of an existing container is not.
func TestPatchAddsContainersIsFlagged(t *testing.T) {
	withPatch := func(patch string) *agentsv1alpha1.SandboxUpdateOps {
		o := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "team", Generation: 1}}
		o.Spec.Patch.Raw = []byte(patch)
		return o
	}
	sel := selection(1, upgrade.NotStarted, upgrade.NotStarted)
	for _, c := range sel.Candidates {
		c.Sandbox.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "v1"}}}}
	}
	other := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "first"}}

	typo := withPatch(`{"spec":{"containers":[{"name":"sandbx","image":"v2"}]}}`)
	st := desiredOpsStatus(typo, other, sel, nil)
	c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionPatchAddsContainers)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "adds containers/sandbx, which sandbox sb-00's template does not have (its containers: sandbox)") {
		t.Fatalf("misspelt container: PatchAddsContainers = %+v", c)
	}
	if st.Phase != agentsv1alpha1.SandboxUpdateOpsPending {
		t.Fatalf("phase = %s: the warning must not change what the ops does", st.Phase)
	}
	right := withPatch(`{"spec":{"containers":[{"name":"sandbox","image":"v2"}]}}`)
	if c := meta.FindStatusCondition(desiredOpsStatus(right, right, sel, nil).Conditions, agentsv1alpha1.ConditionPatchAddsContainers); c != nil {
		t.Fatalf("existing container: PatchAddsContainers = %+v, want none", c)
	}
}

// An ops with postUpgrade and no preUpgrade that gives sandboxes a new pod
// with no backup first is flagged, once, naming them, before anything starts;
// with a preUpgrade it is not.
func TestPostUpgradeWithoutBackupIsFlagged(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "cont", Namespace: "team", Generation: 1}}
	ops.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"sandbox","image":"v2"}]}}`)
	ops.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PostUpgrade: &agentsv1alpha1.UpgradeAction{}}
	sel := selection(1, upgrade.NotStarted, upgrade.NotStarted)
	other := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "first"}}

	st := desiredOpsStatus(ops, other, sel, nil)
	c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionPostUpgradeWithoutBackup)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "2 sandboxes (sb-00, sb-01) get a new pod with no backup of theirs taken") {
		t.Fatalf("PostUpgradeWithoutBackup = %+v", c)
	}
	if st.Phase != agentsv1alpha1.SandboxUpdateOpsPending {
		t.Fatalf("phase = %s: the warning must not change what the ops does", st.Phase)
	}
	both := ops.DeepCopy()
	both.Spec.Lifecycle.PreUpgrade = &agentsv1alpha1.UpgradeAction{}
	if c := meta.FindStatusCondition(desiredOpsStatus(both, both, sel, nil).Conditions, agentsv1alpha1.ConditionPostUpgradeWithoutBackup); c != nil {
		t.Fatalf("with a preUpgrade: PostUpgradeWithoutBackup = %+v, want none", c)
	}
}

// An ops the selector paused before its first sandbox says why in
// Progressing (reason MisspeltContainer, NoBackup, CheckpointKept or
// BackupNotOnVolume), with the ways on, and a
// second ops's wait names it; resumed by hand, it reads as any running ops,
// and paused again by the user, as the user's pause.
func TestMoltsPausesAreExplained(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		annotations  map[string]string
		message      []string
		waiting      string
	}{{
		name: "typo", reason: agentsv1alpha1.ProgressingReasonMisspeltContainer,
		annotations: map[string]string{upgrade.AnnotationMisspeltContainer: "containers/sandbx (1 edit from containers/sandbox)", upgrade.AnnotationMisspeltPausedAt: "2"},
		message:     []string{"molt paused this ops before its first sandbox", "containers/sandbx (1 edit from containers/sandbox)", "delete this ops and create one with the right name", "resume the ops (kubectl patch suo typo -n team"},
		waiting:     "which molt paused before its first sandbox as its patch adds containers/sandbx",
	}, {
		name: "restore", reason: agentsv1alpha1.ProgressingReasonNoBackup,
		annotations: map[string]string{upgrade.AnnotationNoBackup: "sb-1, sb-2", upgrade.AnnotationNoBackupPausedAt: "2"},
		message:     []string{"molt paused this ops before its first sandbox", "The sandboxes: sb-1, sb-2", "agents.kruise.io/upgrade-failed", "resume it (kubectl patch suo restore -n team"},
		waiting:     "which molt paused before its first sandbox as sandboxes sb-1, sb-2 would get a new pod with no backup of their workspace",
	}, {
		name: "continue", reason: agentsv1alpha1.ProgressingReasonCheckpointKept,
		annotations: map[string]string{upgrade.AnnotationCheckpointKept: "sb-1", upgrade.AnnotationCheckpointKeptPausedAt: "2"},
		message:     []string{"molt paused this ops before its first sandbox", "sandboxes sb-1 failed a CheckpointRestore upgrade", "kubectl get cp -n team", "updateStrategy.type CheckpointRestore", "resume it (kubectl patch suo continue -n team"},
		waiting:     "which molt paused before its first sandbox as it would start sandboxes sb-1, whose workspace is kept only in a checkpoint",
	}, {
		name: "upgrade-with-backup", reason: agentsv1alpha1.ProgressingReasonBackupNotOnVolume,
		annotations: map[string]string{upgrade.AnnotationBackupOffVolume: "/mnt/shared (sandbox sb-1)", upgrade.AnnotationBackupOffVolumePausedAt: "2"},
		message:     []string{"molt paused this ops before its first sandbox", "hooks name /mnt/shared (sandbox sb-1)", "every workspace would be lost", "runtimes [{name: csi}]", "delete this ops", "resume it (kubectl patch suo upgrade-with-backup -n team --type merge -p '{\"spec\":{\"paused\":false}}')"},
		waiting:     "which molt paused before its first sandbox as its hooks back up to /mnt/shared (sandbox sb-1), on no volume that outlives the pod",
	}} {
		t.Run(tc.reason, func(t *testing.T) {
			ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: "team", Generation: 2, Annotations: tc.annotations}}
			ops.Spec.Paused = true
			sel := selection(1, upgrade.NotStarted, upgrade.NotStarted)
			progressing := func() *metav1.Condition {
				return meta.FindStatusCondition(desiredOpsStatus(ops, ops, sel, nil).Conditions, agentsv1alpha1.ConditionProgressing)
			}
			c := progressing()
			if c == nil || c.Reason != tc.reason {
				t.Fatalf("Progressing = %+v, want reason %s", c, tc.reason)
			}
			for _, want := range tc.message {
				if !strings.Contains(c.Message, want) {
					t.Errorf("message %q lacks %q", c.Message, want)
				}
			}
			if w := waitingFor(ops); !strings.Contains(w, tc.waiting) {
				t.Errorf("what a second ops waits for: %q, want %q", w, tc.waiting)
			}
			ops.Spec.Paused, ops.Generation = false, 3
			if c := progressing(); c == nil || c.Reason != agentsv1alpha1.ProgressingReasonUpdating {
				t.Fatalf("resumed: Progressing = %+v, want Updating", c)
			}
			ops.Spec.Paused, ops.Generation = true, 4 // paused again, by the user
			if c := progressing(); c == nil || c.Reason != agentsv1alpha1.ProgressingReasonPaused {
				t.Fatalf("paused again by the user: Progressing = %+v, want Paused", c)
			}
		})
	}
}

// A patch changed after its check fails the ops, but only once the sandboxes admitted
// under the first patch have ended their stage: until then it stays Updating (holding its
// namespace, admitting nothing) with InvalidPatch=True saying why.
func TestPatchChangedAfterItsCheckWaitsForTheTail(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Generation: 1, Annotations: map[string]string{
		upgrade.AnnotationPatchCheck: upgrade.PatchCheckOK, upgrade.AnnotationPatchDigest: upgrade.PatchDigest([]byte(`{"spec":{"hostname":"a"}}`)),
	}}}
	ops.Spec.Patch.Raw = []byte(`{"spec":{"subdomain":"a"}}`)
	st := desiredOpsStatus(ops, ops, selection(1, upgrade.Updated, upgrade.Updating, upgrade.NotStarted), nil)
	invalid := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionInvalidPatch)
	if st.Phase != agentsv1alpha1.SandboxUpdateOpsUpdating || invalid == nil || invalid.Status != metav1.ConditionTrue {
		t.Fatalf("with one in a stage: phase %s, InvalidPatch %+v; want Updating, True", st.Phase, invalid)
	}
	if p := meta.FindStatusCondition(st.Conditions, "Progressing"); p == nil || !strings.Contains(p.Message, "waiting for 1 sandbox in a stage to end") {
		t.Fatalf("Progressing = %+v", p)
	}
	st = desiredOpsStatus(ops, ops, selection(1, upgrade.Updated, upgrade.Updated, upgrade.NotStarted), nil)
	if st.Phase != agentsv1alpha1.SandboxUpdateOpsFailed {
		t.Fatalf("with none in a stage: phase %s, want Failed", st.Phase)
	}
}

// A paused ops, and one waiting behind a paused ops, say how it resumes.
func TestPausedOpsSaysHowToResume(t *testing.T) {
	paused := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: "team"}}
	paused.Spec.Paused = true
	waiting := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: "team"}}
	st := desiredOpsStatus(waiting, paused, selection(1, upgrade.NotStarted), nil)
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionWaitingForNamespace); c == nil || !strings.Contains(c.Message, "first") || !strings.Contains(c.Message, "paused") || !strings.Contains(c.Message, `"paused":false`) {
		t.Errorf("WaitingForNamespace = %+v, want it to say first is paused and how to resume it", c)
	}
	st = desiredOpsStatus(paused, paused, selection(1, upgrade.NotStarted), nil)
	if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionProgressing); c == nil || c.Reason != agentsv1alpha1.ProgressingReasonPaused || !strings.Contains(c.Message, "kubectl patch suo first -n team") {
		t.Errorf("Progressing = %+v, want Paused with how to resume", c)
	}
}

// An ops without a patch that resumes nothing completes saying its patch is empty and
// what such an ops is for, not only that the sandboxes "already have the patched
// template" (true of any template under an empty patch).
func TestNothingToUpdateSaysThePatchIsEmpty(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "box-0"}}
	sel := upgrade.Selection{Excluded: []upgrade.Exclusion{{Sandbox: sb, Reason: upgrade.ExcludedNoNeed}}}
	for _, tc := range []struct {
		name, patch string
		want        bool
	}{{"no patch", "", true}, {"an empty object", "{}", true}, {"an image patch", `{"spec":{"containers":[{"name":"sandbox","image":"x:v2"}]}}`, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "hooks-only", Namespace: "ns"}}
			if tc.patch != "" {
				ops.Spec.Patch.Raw = []byte(tc.patch)
			}
			st := desiredOpsStatus(ops, ops, sel, nil)
			c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionProgressing)
			if st.Phase != agentsv1alpha1.SandboxUpdateOpsCompleted || c == nil || c.Reason != agentsv1alpha1.ProgressingReasonNothingToUpdate {
				t.Fatalf("phase %s, Progressing %+v; want Completed, NothingToUpdate", st.Phase, c)
			}
			if got := strings.HasPrefix(c.Message, "spec.patch is empty"); got != tc.want {
				t.Errorf("message %q: says the patch is empty %t, want %t", c.Message, got, tc.want)
			}
			// spec.patch is immutable: the way on is a new ops (a walk
			// read "set spec.patch").
			if tc.want && !strings.Contains(c.Message, "delete this ops and apply it again with spec.patch") {
				t.Errorf("message %q does not say to apply the ops again with a patch", c.Message)
			}
		})
	}
}

// An ops that selects no sandbox at all (a typo in its selector, a stateFilter that
// leaves every one out, no sandbox in its namespace) completes as NothingSelected, says
// nothing was upgraded and what to fix, and is announced by a Warning Event; one whose
// selected sandboxes all have the patched template already (an ops applied again, and
// those the selector leaves out besides) is NothingToUpdate, announced as completed.
func TestNothingSelectedIsToldApartFromNothingToUpdate(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns"}}
	ops.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"sandbox","image":"x:v2"}]}}`)
	box := func(name, reason string) upgrade.Exclusion {
		return upgrade.Exclusion{Sandbox: &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}}, Reason: reason, Detail: "app=sandbx"}
	}
	for _, tc := range []struct {
		name                 string
		excluded             []upgrade.Exclusion
		reason, event, start string
	}{
		{"a selector with a typo", []upgrade.Exclusion{box("a", upgrade.ExcludedSelector), box("b", upgrade.ExcludedSelector)},
			agentsv1alpha1.ProgressingReasonNothingSelected, EventOpsNothingSelected, "nothing was upgraded: no sandbox was selected: of the 2 sandboxes in namespace ns, 2 do not match spec.selector (app=sandbx)"},
		{"a namespace without sandboxes", nil,
			agentsv1alpha1.ProgressingReasonNothingSelected, EventOpsNothingSelected, "nothing was upgraded: no sandbox was selected: namespace ns has no sandbox"},
		{"applied again", []upgrade.Exclusion{box("a", upgrade.ExcludedSelector), box("b", upgrade.ExcludedNoNeed)},
			agentsv1alpha1.ProgressingReasonNothingToUpdate, EventOpsCompleted, "no selected sandbox needs this patch: of the 2 sandboxes in namespace ns, 1 does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := desiredOpsStatus(ops, ops, upgrade.Selection{MaxUnavailable: 1, Excluded: tc.excluded}, nil)
			c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionProgressing)
			if st.Phase != agentsv1alpha1.SandboxUpdateOpsCompleted || c == nil || c.Status != metav1.ConditionFalse || c.Reason != tc.reason {
				t.Fatalf("phase %s, Progressing %+v; want Completed, False/%s", st.Phase, c, tc.reason)
			}
			if !strings.HasPrefix(c.Message, tc.start) {
				t.Errorf("message %q, want it to start %q", c.Message, tc.start)
			}
			if fix := strings.Contains(c.Message, "apply it again with spec.selector") || strings.Contains(c.Message, "apply it in theirs"); fix != (tc.reason == agentsv1alpha1.ProgressingReasonNothingSelected) {
				t.Errorf("message %q: says what to fix %t", c.Message, fix)
			}
			eventType, reason := opsPhaseEvent(st)
			wantType := corev1.EventTypeNormal
			if tc.reason == agentsv1alpha1.ProgressingReasonNothingSelected {
				wantType = corev1.EventTypeWarning
			}
			if eventType != wantType || reason != tc.event {
				t.Errorf("Event %s %s, want %s %s", eventType, reason, wantType, tc.event)
			}
		})
	}
}

// An ops whose only sandboxes left are ones the API server refuses to let it claim
// ends Failed, saying so, once nothing is upgrading; while one still upgrades it stays
// Updating. The refusal shows as ClaimRefused throughout.
func TestOpsWithOnlyRefusedClaimsLeftFails(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", Generation: 1}}
	ops.Status.Phase = agentsv1alpha1.SandboxUpdateOpsUpdating
	value, _ := upgrade.WithClaimRefused(ops, map[string]string{"sb-01": "frozen by policy"})
	ops.Annotations = map[string]string{upgrade.AnnotationClaimRefused: value}
	for _, tc := range []struct {
		name      string
		states    []upgrade.State
		wantPhase agentsv1alpha1.SandboxUpdateOpsPhase
	}{
		{"another still upgrading", []upgrade.State{upgrade.Updating, upgrade.NotStarted}, agentsv1alpha1.SandboxUpdateOpsUpdating},
		{"only the refused one left", []upgrade.State{upgrade.Updated, upgrade.NotStarted}, agentsv1alpha1.SandboxUpdateOpsFailed},
		{"a failure, budget left, and the refused one", []upgrade.State{upgrade.Failed, upgrade.NotStarted}, agentsv1alpha1.SandboxUpdateOpsFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel := selection(2, tc.states...)
			sel.Candidates[1].Refused, sel.Refused = "frozen by policy", 1
			st := desiredOpsStatus(ops, ops, sel, nil)
			if st.Phase != tc.wantPhase {
				t.Fatalf("phase %s, want %s", st.Phase, tc.wantPhase)
			}
			c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionClaimRefused)
			if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "sb-01: frozen by policy") {
				t.Fatalf("ClaimRefused = %+v, want True naming sb-01 with the server's words", c)
			}
			if p := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionProgressing); tc.wantPhase == agentsv1alpha1.SandboxUpdateOpsFailed &&
				(p == nil || p.Reason != agentsv1alpha1.ProgressingReasonClaimRefused || !strings.Contains(p.Message, "kubectl molt retry up -n ns")) {
				t.Fatalf("Progressing = %+v, want ClaimRefused with the retry", p)
			}
			if budget := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionFailureBudgetExhausted); (tc.states[0] == upgrade.Failed) != (budget != nil && strings.Contains(budget.Message, "sb-00")) {
				t.Fatalf("FailureBudgetExhausted = %+v; want it, naming the failed sb-00, exactly when one failed", budget)
			}
		})
	}
}

// An ops Pending before its first sandbox is not announced as waiting for the
// namespace: only one that waits for another ops is (OpsWaiting).
func TestPendingIsAnnouncedOnlyWhenItWaits(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: "ns"}}
	first := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: "ns"}}
	if _, reason := opsPhaseEvent(desiredOpsStatus(ops, ops, selection(1, upgrade.NotStarted), nil)); reason != "" {
		t.Errorf("Pending before its first sandbox announced as %q, want no Event", reason)
	}
	if _, reason := opsPhaseEvent(desiredOpsStatus(ops, first, selection(1, upgrade.NotStarted), nil)); reason != EventOpsWaiting {
		t.Errorf("Pending behind another ops announced as %q, want %s", reason, EventOpsWaiting)
	}
}
