package upgrade

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

func sandbox(label, attempt, reason string) *agentsv1alpha1.Sandbox {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}}}
	if label != "" {
		sb.Labels[agentsv1alpha1.LabelUpdateOps] = label
	}
	if attempt != "" {
		sb.Status.Conditions = append(sb.Status.Conditions,
			metav1.Condition{Type: ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Admitted", Message: attempt})
	}
	if reason != "" {
		sb.Status.Conditions = append(sb.Status.Conditions,
			metav1.Condition{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason})
	}
	return sb
}

func TestStateFor(t *testing.T) {
	cases := []struct {
		name string
		sb   *agentsv1alpha1.Sandbox
		want State
	}{
		{"no label", sandbox("", "", ""), NotStarted},
		{"other ops", sandbox("other", "u1", "Succeeded"), NotStarted},
		{"admitted, no status yet", sandbox("ops", "", ""), Updating},
		{"admitted, old attempt succeeded", sandbox("ops", "old-uid", "Succeeded"), Updating},
		{"this attempt in PreUpgrade", sandbox("ops", "u1", "PreUpgrade"), Updating},
		{"this attempt succeeded", sandbox("ops", "u1", "Succeeded"), Updated},
		{"this attempt failed", sandbox("ops", "u1", "UpgradePodFailed"), Failed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := StateFor(tc.sb, "ops", "u1"); got != tc.want {
				t.Fatalf("StateFor = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRevisionIsStableAndSensitive(t *testing.T) {
	a := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i:v1"}}}}
	b := a.DeepCopy()
	ra, err := Revision(a)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := Revision(b)
	if ra != rb {
		t.Fatalf("equal templates: %s != %s", ra, rb)
	}
	b.Spec.Containers[0].Image = "i:v2"
	if rc, _ := Revision(b); rc == ra {
		t.Fatalf("different templates share revision %s", ra)
	}
	if _, err := Revision(nil); err == nil {
		t.Fatal("Revision(nil) did not fail")
	}
}

func TestCountsMayChange(t *testing.T) {
	with := func(sb *agentsv1alpha1.Sandbox, change func(*agentsv1alpha1.Sandbox)) *agentsv1alpha1.Sandbox {
		sb = sb.DeepCopy()
		change(sb)
		return sb
	}
	inFlight := sandbox("ops", "u1", "PreUpgrade")
	for _, tc := range []struct {
		name     string
		old, cur *agentsv1alpha1.Sandbox
		want     bool
	}{
		{"nothing changed", inFlight, inFlight.DeepCopy(), false},
		{"a stage moves on", inFlight, sandbox("ops", "u1", "UpgradePod"), false},
		{"the pod's IP changes", inFlight, with(inFlight, func(sb *agentsv1alpha1.Sandbox) { sb.Status.SandboxIP = "10.0.0.9" }), false},
		{"the template is patched", inFlight, with(inFlight, func(sb *agentsv1alpha1.Sandbox) { sb.Generation++ }), false},
		{"the attempt succeeds", inFlight, sandbox("ops", "u1", "Succeeded"), true},
		{"the attempt fails", inFlight, sandbox("ops", "u1", "PreUpgradeFailed"), true},
		{"a new attempt begins", sandbox("ops", "u0", "Succeeded"), sandbox("ops", "u1", "PreUpgrade"), true},
		{"the ops claims it", sandbox("", "", ""), sandbox("ops", "", ""), true},
		{"the claim is released", inFlight, sandbox("", "u1", "PreUpgrade"), true},
		{"the phase changes", inFlight, with(inFlight, func(sb *agentsv1alpha1.Sandbox) { sb.Status.Phase = agentsv1alpha1.SandboxUpgrading }), true},
		{"it is being deleted", inFlight, with(inFlight, func(sb *agentsv1alpha1.Sandbox) { sb.DeletionTimestamp = &metav1.Time{} }), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CountsMayChange(tc.old, tc.cur); got != tc.want {
				t.Fatalf("CountsMayChange = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTakesBudgetOnly(t *testing.T) {
	with := func(sb *agentsv1alpha1.Sandbox, change func(*agentsv1alpha1.Sandbox)) *agentsv1alpha1.Sandbox {
		sb = sb.DeepCopy()
		change(sb)
		return sb
	}
	running := with(sandbox("", "", ""), func(sb *agentsv1alpha1.Sandbox) { sb.Status.Phase = agentsv1alpha1.SandboxRunning })
	claimed := with(running, func(sb *agentsv1alpha1.Sandbox) { sb.Labels[agentsv1alpha1.LabelUpdateOps] = "ops" })
	started := with(sandbox("ops", "u1", "PreUpgrade"), func(sb *agentsv1alpha1.Sandbox) { sb.Status.Phase = agentsv1alpha1.SandboxUpgrading })
	for _, tc := range []struct {
		name     string
		old, cur *agentsv1alpha1.Sandbox
		want     bool
	}{
		{"the ops claims it", running, claimed, true},
		{"its attempt starts", claimed, started, true},
		{"a stage moves on", started, with(started, func(sb *agentsv1alpha1.Sandbox) { sb.Status.Conditions[1].Reason = "UpgradePod" }), true},
		{"a failed attempt is resumed", with(started, func(sb *agentsv1alpha1.Sandbox) { sb.Status.Conditions[1].Reason = "UpgradePodFailed" }),
			with(started, func(sb *agentsv1alpha1.Sandbox) { sb.Status.Conditions[0].Message = "u2" }), true},
		{"the attempt succeeds", started, with(started, func(sb *agentsv1alpha1.Sandbox) { sb.Status.Conditions[1].Reason = "Succeeded" }), false},
		{"the attempt fails", started, with(started, func(sb *agentsv1alpha1.Sandbox) { sb.Status.Conditions[1].Reason = "PreUpgradeFailed" }), false},
		{"the phase goes back to Running", started, with(started, func(sb *agentsv1alpha1.Sandbox) { sb.Status.Phase = agentsv1alpha1.SandboxRunning }), false},
		{"the claim is released", claimed, running, false},
		{"another ops takes the claim", claimed, with(claimed, func(sb *agentsv1alpha1.Sandbox) { sb.Labels[agentsv1alpha1.LabelUpdateOps] = "other" }), false},
		{"another label changes", running, with(running, func(sb *agentsv1alpha1.Sandbox) { sb.Labels["team"] = "a" }), false},
		{"claimed while another label changes", running, with(claimed, func(sb *agentsv1alpha1.Sandbox) { sb.Labels["team"] = "a" }), false},
		{"a label is removed while claimed", with(claimed, func(sb *agentsv1alpha1.Sandbox) { sb.Labels["team"] = "a" }), claimed, false},
		{"a label is added while claimed", claimed, with(claimed, func(sb *agentsv1alpha1.Sandbox) { sb.Labels["team"] = "a" }), false},
		{"claimed where the label was empty", with(running, func(sb *agentsv1alpha1.Sandbox) { sb.Labels[agentsv1alpha1.LabelUpdateOps] = "" }), claimed, true},
		{"it is being deleted", started, with(started, func(sb *agentsv1alpha1.Sandbox) { sb.DeletionTimestamp = &metav1.Time{} }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TakesBudgetOnly(tc.old, tc.cur); got != tc.want {
				t.Fatalf("TakesBudgetOnly = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSucceededOnly(t *testing.T) {
	started := sandbox("ops", "u1", "UpgradePod")
	with := func(change func(*agentsv1alpha1.Sandbox)) *agentsv1alpha1.Sandbox {
		sb := started.DeepCopy()
		change(sb)
		return sb
	}
	for _, tc := range []struct {
		name string
		cur  *agentsv1alpha1.Sandbox
		want bool
	}{
		{"the attempt succeeds", with(func(sb *agentsv1alpha1.Sandbox) { sb.Status.Conditions[1].Reason = "Succeeded" }), true},
		{"the attempt fails", with(func(sb *agentsv1alpha1.Sandbox) { sb.Status.Conditions[1].Reason = "UpgradePodFailed" }), false},
		{"a stage moves on", with(func(sb *agentsv1alpha1.Sandbox) { sb.Status.Conditions[1].Reason = "PostUpgrade" }), false},
		{"it succeeds and loses its claim", with(func(sb *agentsv1alpha1.Sandbox) {
			sb.Status.Conditions[1].Reason = "Succeeded"
			delete(sb.Labels, agentsv1alpha1.LabelUpdateOps)
		}), false},
		{"it succeeds while being deleted", with(func(sb *agentsv1alpha1.Sandbox) {
			sb.Status.Conditions[1].Reason = "Succeeded"
			sb.DeletionTimestamp = &metav1.Time{}
		}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SucceededOnly(started, tc.cur); got != tc.want {
				t.Fatalf("SucceededOnly = %v, want %v", got, tc.want)
			}
		})
	}
}

// A direct attempt id gives back the generation it was made with; other ids do not.
func TestDirectAttemptGeneration(t *testing.T) {
	if gen, ok := DirectAttemptGeneration(DirectAttempt("5d8f9c7b", 12)); !ok || gen != 12 {
		t.Fatalf("DirectAttemptGeneration = %d, %v; want 12, true", gen, ok)
	}
	if _, ok := DirectAttemptGeneration("0b7c7c2e-uid"); ok {
		t.Fatal("an ops attempt id parsed as a direct one")
	}
}

func TestPatchProblemSeesAPatchChangedAfterItsCheck(t *testing.T) {
	checked := []byte(`{"spec":{"nodeSelector":{"pool":"a"},"containers":[{"name":"main","image":"v2"}]}}`)
	ops := func(annotations map[string]string, raw string) *agentsv1alpha1.SandboxUpdateOps {
		o := &agentsv1alpha1.SandboxUpdateOps{}
		o.UID = "uid-1"
		o.Annotations = annotations
		o.Spec.Patch.Raw = []byte(raw)
		return o
	}
	ok := map[string]string{AnnotationPatchCheck: PatchCheckOK, AnnotationPatchDigest: PatchDigest(checked)}
	for _, tc := range []struct {
		name    string
		ops     *agentsv1alpha1.SandboxUpdateOps
		problem string
	}{
		{"not checked yet", ops(nil, string(checked)), ""},
		{"refused", ops(map[string]string{AnnotationPatchCheck: "bad field"}, string(checked)), "bad field"},
		{"passed, unchanged", ops(ok, string(checked)), ""},
		{"passed, the same patch with its keys in another order", ops(ok, `{"spec":{"containers":[{"image":"v2","name":"main"}],"nodeSelector":{"pool":"a"}}}`), ""},
		{"passed, a key swapped for another since", ops(ok, `{"spec":{"affinity":{"pool":"a"},"containers":[{"name":"main","image":"v2"}]}}`), "spec.patch was changed after the selector checked it"},
		{"passed before digests were recorded", ops(map[string]string{AnnotationPatchCheck: PatchCheckOK}, `{"spec":{}}`), ""},
		{"refused for this ops", ops(map[string]string{AnnotationPatchCheck: "bad field", AnnotationPatchCheckFor: "uid-1"}, string(checked)), "bad field"},
		{"a refusal copied from another ops's YAML", ops(map[string]string{AnnotationPatchCheck: "bad field", AnnotationPatchCheckFor: "uid-0"}, string(checked)), ""},
		{"a pass copied from another ops's YAML, its patch fixed since", ops(map[string]string{AnnotationPatchCheck: PatchCheckOK, AnnotationPatchDigest: PatchDigest([]byte(`{"spec":{}}`)), AnnotationPatchCheckFor: "uid-0"}, string(checked)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PatchProblem(tc.ops)
			if (tc.problem == "") != (got == "") || !strings.Contains(got, tc.problem) {
				t.Fatalf("PatchProblem = %q, want %q", got, tc.problem)
			}
		})
	}
}

func TestClaimedBy(t *testing.T) {
	current := func(sb *agentsv1alpha1.Sandbox, attempt string, generation ...int64) *agentsv1alpha1.Sandbox {
		sb.Status.Conditions = []metav1.Condition{{Type: ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: attempt}}
		if len(generation) > 0 {
			sb.Status.Conditions[0].ObservedGeneration = generation[0]
		}
		return sb
	}
	sandbox := func(label, claim string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Annotations: map[string]string{}}}
		if label != "" {
			sb.Labels[agentsv1alpha1.LabelUpdateOps] = label
		}
		if claim != "" {
			sb.Annotations[AnnotationClaim] = claim
		}
		return sb
	}
	templated := func(sb *agentsv1alpha1.Sandbox, image string) *agentsv1alpha1.Sandbox {
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}
		return sb
	}
	direct := func(image string, gen int64) string {
		rev, err := Revision(templated(sandbox("", ""), image).Spec.Template)
		if err != nil {
			t.Fatal(err)
		}
		return DirectAttempt(rev, gen)
	}
	for _, tc := range []struct {
		name         string
		sb           *agentsv1alpha1.Sandbox
		ops, attempt string
		want         bool
	}{
		{"this ops, this attempt", sandbox("up", "up uid-1"), "up", "uid-1", true},
		{"the same name applied again: an event of the first attempt", sandbox("up", "up uid-2"), "up", "uid-1", false},
		{"another ops", sandbox("other", "other uid-9"), "up", "uid-1", false},
		{"released", sandbox("", ""), "up", "uid-1", false},
		{"admitted by an older molt (no claim): the name decides", sandbox("up", ""), "up", "uid-1", true},
		{"relabelled by an older molt over an earlier claim: the name decides", sandbox("up", "earlier uid-0"), "up", "uid-1", true},
		{"an event of an older molt (no attempt): the name decides", sandbox("up", "up uid-2"), "up", "", true},
		{"direct attempt on an unclaimed sandbox", sandbox("", ""), "", "d-1", true},
		{"direct attempt on a sandbox an ops claimed since", sandbox("up", "up uid-1"), "", "d-1", false},
		{"direct attempt the status shows", current(sandbox("", ""), "direct-r5-5"), "", "direct-r5-5", true},
		{"direct attempt before the status shows any", sandbox("", ""), "", direct("v2", 5), true},
		{"direct attempt before the status shows any, the template edited again since", templated(sandbox("", ""), "v3"), "", direct("v2", 5), true},
		{"direct attempt newer than the one shown", current(sandbox("", ""), "direct-r5-5"), "", "direct-r6-6", true},
		{"direct attempt the user's next edit superseded", current(sandbox("", ""), "direct-r6-6"), "", "direct-r5-5", false},
		{"direct attempt after an ops's attempt", current(sandbox("", ""), "uid-1", 4), "", direct("v2", 5), true},
		{"direct attempt after an ops's attempt that saw the user's edit", current(sandbox("", ""), "uid-1", 5), "", direct("v2", 5), true},
		{"an old direct attempt replayed after an ops upgraded the sandbox", current(sandbox("", ""), "uid-1", 6), "", direct("v2", 5), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClaimedBy(tc.sb, tc.ops, tc.attempt); got != tc.want {
				t.Errorf("ClaimedBy(%q, %q) = %v, want %v", tc.ops, tc.attempt, got, tc.want)
			}
		})
	}
}

// A pod built for a sandbox whose attempt failed is the attempt's (never
// backed up over its backup) only when the attempt or its chain may have
// replaced the pod.
func TestMayHaveReplacedPod(t *testing.T) {
	with := func(resumes string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{}
		if resumes != "" {
			sb.Annotations = map[string]string{AnnotationResumes: resumes}
		}
		return sb
	}
	const pre, ckpt, pod, post = agentsv1alpha1.UpgradingReasonPreUpgradeFailed, agentsv1alpha1.UpgradingReasonCheckpointFailed,
		agentsv1alpha1.UpgradingReasonUpgradePodFailed, agentsv1alpha1.UpgradingReasonPostUpgradeFailed
	for _, tc := range []struct {
		name    string
		sb      *agentsv1alpha1.Sandbox
		reason  string
		replace bool
	}{
		{"a fresh attempt failed in PreUpgrade", with(""), pre, false},
		{"a fresh attempt failed in Checkpointing", with(""), ckpt, false},
		{"failed in UpgradePod", with(""), pod, true},
		{"failed in PostUpgrade", with(""), post, true},
		{"continued one failed in PreUpgrade, failed there too", with("a2 a1 " + pre), pre, false},
		{"continued one failed in UpgradePod, then failed before it", with("a2 a1 " + pod), pre, true},
		{"continued a chain whose earlier reasons are not kept", with("a2 a1 " + pre + " a0"), pre, true},
		{"continued a chain of failures before the backup (failed wake-ups)", with("a2 a1 " + pre + " a0=" + pre), pre, false},
		{"continued a chain with a failure in UpgradePod earlier", with("a2 a1 " + pre + " a0=" + pod), pre, true},
		{"continued a chain with a failed checkpoint earlier", with("a2 a1 " + pre + " a0=" + ckpt), pre, true},
		{"a later attempt continued it and was abandoned, its outcome not recorded", with("a3 a2 " + pre), pre, true},
		{"a later attempt admitted now continues it (a paused sandbox woken for it)", claimedFor(with("a3 a2 "+pre), "ops3", "a3"), pre, false},
		{"a later direct attempt continues it", with(DirectAttemptPrefix + "r2-3 a2 " + pre), pre, false},
		{"another sandbox's record", with("b2 b1 " + pod), pre, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MayHaveReplacedPod(tc.sb, "a2", tc.reason); got != tc.replace {
				t.Errorf("MayHaveReplacedPod(%q, a2, %s) = %v, want %v", tc.sb.Annotations[AnnotationResumes], tc.reason, got, tc.replace)
			}
		})
	}
}

// claimedFor is sb claimed by ops opsName for attempt, as the selector's
// admission writes it.
func claimedFor(sb *agentsv1alpha1.Sandbox, opsName, attempt string) *agentsv1alpha1.Sandbox {
	sb.Labels = map[string]string{agentsv1alpha1.LabelUpdateOps: opsName}
	sb.Annotations[AnnotationClaim] = ClaimValue(opsName, attempt)
	return sb
}

// A chain longer than a record keeps still counts as past its backup when an
// attempt left out got past it (an UpgradePodFailed long ago, then many
// failures before their backup).
func TestResumesValueKeepsALeftOutReplacement(t *testing.T) {
	pre := agentsv1alpha1.UpgradingReasonPreUpgradeFailed
	var earlier []string
	for i := range maxResumedChain + 3 {
		earlier = append(earlier, fmt.Sprintf("a%d=%s", i, pre))
	}
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationResumes: ResumesValue("n", "f", pre, earlier...)}}}
	if MayHaveReplacedPod(sb, "n", pre) {
		t.Errorf("a chain of failures before their backup only: may have replaced the pod")
	}
	earlier[len(earlier)-1] = "old=" + agentsv1alpha1.UpgradingReasonUpgradePodFailed
	sb.Annotations[AnnotationResumes] = ResumesValue("n", "f", pre, earlier...)
	if !MayHaveReplacedPod(sb, "n", pre) {
		t.Errorf("the UpgradePodFailed left out of %q is forgotten", sb.Annotations[AnnotationResumes])
	}
	if got := len(strings.Fields(sb.Annotations[AnnotationResumes])); got != 2+maxResumedChain {
		t.Errorf("%d fields, want %d", got, 2+maxResumedChain)
	}
}
