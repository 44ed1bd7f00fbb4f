package podcycler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	agentsfake "molt.dev/pkg/generated/clientset/versioned/fake"
	"molt.dev/pkg/upgrade"
)

// The attempts of the planRestore cases: A failed, B continues it.
const (
	attemptA = "uid-a"
	attemptB = "uid-b"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func restoreSandbox() *agentsv1alpha1.Sandbox {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "box", UID: "sb-uid"}}
	sb.Spec.Template = &corev1.PodTemplateSpec{}
	return sb
}

// testCheckpoint is a checkpoint of sb taken by attempt, created at t0+age, in phase
// with id.
func testCheckpoint(sb *agentsv1alpha1.Sandbox, attempt string, age time.Duration, phase agentsv1alpha1.CheckpointPhase, id string) agentsv1alpha1.Checkpoint {
	return agentsv1alpha1.Checkpoint{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: sb.Namespace, Name: upgrade.CheckpointName(sb.Name, attempt), CreationTimestamp: metav1.NewTime(t0.Add(age)),
			Labels:          map[string]string{upgrade.LabelCheckpointAttempt: upgrade.AttemptHash(attempt)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, sandboxKind)},
		},
		Status: agentsv1alpha1.CheckpointStatus{Phase: phase, CheckpointID: id},
	}
}

// restorePod is a live pod of sb built by attempt ("" for the original pod), with
// restore-from and restored set when not empty.
func restorePod(sb *agentsv1alpha1.Sandbox, attempt, restoreFrom, restored string) *corev1.Pod {
	pod := buildPod(sb, "rev", attempt, "ops")
	pod.UID = types.UID("pod-" + attempt)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	if restoreFrom != "" {
		pod.Annotations[upgrade.AnnotationRestoreFrom] = restoreFrom
	}
	if restored != "" {
		pod.Annotations[upgrade.AnnotationRestored] = restored
	}
	return pod
}

func TestPlanRestore(t *testing.T) {
	sb := restoreSandbox()
	other := restoreSandbox()
	other.UID = "earlier-sandbox-of-that-name"

	cpA := testCheckpoint(sb, attemptA, 0, agentsv1alpha1.CheckpointSucceeded, "id-a")
	cpOld := testCheckpoint(sb, "uid-old", -time.Hour, agentsv1alpha1.CheckpointSucceeded, "id-old")
	cpBPending := testCheckpoint(sb, attemptB, time.Minute, agentsv1alpha1.CheckpointCreating, "")
	cpBFailed := testCheckpoint(sb, attemptB, time.Minute, agentsv1alpha1.CheckpointFailed, "")
	cpB := testCheckpoint(sb, attemptB, time.Minute, agentsv1alpha1.CheckpointSucceeded, "id-b")
	cpForeign := testCheckpoint(other, "uid-x", time.Hour, agentsv1alpha1.CheckpointSucceeded, "id-foreign")
	cpLaterFailed := testCheckpoint(sb, "uid-z", 2*time.Minute, agentsv1alpha1.CheckpointFailed, "")

	deleting := restorePod(sb, "", "", "")
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}

	tests := []struct {
		name    string
		pod     *corev1.Pod
		resumed string
		own     *agentsv1alpha1.Checkpoint
		list    []agentsv1alpha1.Checkpoint
		// want is the id restored, "fresh", or "problem: <substring>".
		want string
		// noList: the decision must not list the sandbox's checkpoints.
		noList bool
		// chain: the earlier failed attempts the resumed one continued
		// (upgrade.AnnotationResumes).
		chain []string
	}{
		{name: "own checkpoint succeeded: restore it, whatever the pod", pod: restorePod(sb, attemptA, "id-a", ""), resumed: attemptA, own: &cpB, list: []agentsv1alpha1.Checkpoint{cpA, cpB}, want: "id-b", noList: true},
		{name: "original pod, first attempt: checkpoint it", pod: restorePod(sb, "", "", ""), want: "fresh", noList: true},
		{name: "original pod, own checkpoint still being taken: checkpoint it (wait for it)", pod: restorePod(sb, "", "", ""), own: &cpBPending, want: "fresh", noList: true},
		{name: "original pod still running after a failed attempt took a checkpoint (dry-run refused): checkpoint it again, not the older one", pod: restorePod(sb, "", "", ""), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpA}, want: "fresh", noList: true},
		{name: "pod of an earlier upgrade that succeeded, restored: checkpoint it", pod: restorePod(sb, "uid-old", "id-old", "id-old"), list: []agentsv1alpha1.Checkpoint{cpOld}, want: "fresh", noList: true},
		{name: "pod of an earlier success, restored, its checkpoint left by a missed cleanup, attempt continues a failure on that pod: checkpoint it", pod: restorePod(sb, "uid-old", "id-old", "id-old"), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpOld}, want: "fresh", noList: true},

		// The review's sequence: A checkpointed, built its pod, the pod failed; B continues A.
		{name: "pod built by the failed attempt, never restored: restore its checkpoint", pod: restorePod(sb, attemptA, "id-a", ""), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpA}, want: "id-a"},
		{name: "pod built by the failed attempt, restored, then failed: restore its checkpoint, do not checkpoint the pod", pod: restorePod(sb, attemptA, "id-a", "id-a"), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpA}, want: "id-a"},
		{name: "pod built by the failed attempt that reused an older checkpoint: restore that one", pod: restorePod(sb, attemptA, "id-old", ""), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpOld, cpA}, want: "id-old"},
		{name: "own checkpoint failed (a second attempt): still restore the kept one", pod: restorePod(sb, attemptA, "id-a", ""), resumed: attemptA, own: &cpBFailed, list: []agentsv1alpha1.Checkpoint{cpA, cpBFailed}, want: "id-a"},
		{name: "pod never restored, not resumed: restore the checkpoint it names rather than checkpoint an empty pod", pod: restorePod(sb, attemptA, "id-a", ""), list: []agentsv1alpha1.Checkpoint{cpA}, want: "id-a"},
		{name: "pod built by the failed attempt, restored, its checkpoint gone: checkpoint it", pod: restorePod(sb, attemptA, "id-gone", "id-gone"), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{}, want: "fresh"},
		{name: "pod never restored, its checkpoint gone, another kept by the failed attempt: restore it", pod: restorePod(sb, attemptA, "id-gone", ""), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpA}, want: "id-a"},
		{name: "pod never restored, its checkpoint gone, another kept by an earlier failure it continued: restore it", pod: restorePod(sb, attemptA, "id-gone", ""), resumed: attemptA, chain: []string{"uid-old"}, list: []agentsv1alpha1.Checkpoint{cpOld}, want: "id-old"},
		{name: "pod never restored, its checkpoint gone, only a leftover from before the last success: not restored", pod: restorePod(sb, attemptA, "id-gone", ""), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpOld}, want: "problem: its files are lost"},
		{name: "pod never restored, its checkpoint gone, none kept: nothing to restore", pod: restorePod(sb, attemptA, "id-gone", ""), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{}, want: "problem: was built to be restored from checkpoint id-gone, which was never restored into it and no longer exists"},
		{name: "pod named a checkpoint of an earlier sandbox of that name: not restored from it", pod: restorePod(sb, attemptA, "id-foreign", ""), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpForeign}, want: "problem: was built to be restored from checkpoint id-foreign"},
		{name: "pod built by the failed attempt without restore-from: restore the kept checkpoint", pod: restorePod(sb, attemptA, "", ""), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpA}, want: "id-a"},
		{name: "pod built by this attempt without restore-from, none kept: checkpoint it", pod: restorePod(sb, attemptB, "", ""), resumed: attemptA, list: []agentsv1alpha1.Checkpoint{}, want: "fresh"},

		{name: "no pod, own checkpoint succeeded", own: &cpB, list: []agentsv1alpha1.Checkpoint{cpA, cpB}, want: "id-b", noList: true},
		{name: "no pod, attempt continues a failed one: the newest succeeded checkpoint of this sandbox", resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpOld, cpForeign, cpA, cpLaterFailed, cpBPending}, want: "id-a"},
		{name: "no pod, only a leftover of an attempt before the last success: not restored", resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpOld}, want: "problem: has no running pod to checkpoint"},
		{name: "no pod, a checkpoint of an earlier failure the failed attempt continued", resumed: attemptA, chain: []string{"uid-old"}, list: []agentsv1alpha1.Checkpoint{cpOld}, want: "id-old"},
		{name: "pod being deleted counts as none", pod: deleting, resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpA}, want: "id-a"},
		{name: "no pod, attempt continues nothing: a leftover is not restored", list: []agentsv1alpha1.Checkpoint{cpOld}, want: "problem: has no running pod to checkpoint and no checkpoint of this attempt succeeded", noList: true},
		{name: "no pod, nothing kept", resumed: attemptA, list: []agentsv1alpha1.Checkpoint{cpForeign}, want: "problem: has no running pod to checkpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			listed := 0
			sb := sb.DeepCopy()
			if tt.chain != nil {
				sb.Annotations = map[string]string{upgrade.AnnotationResumes: upgrade.ResumesValue(attemptB, tt.resumed, agentsv1alpha1.UpgradingReasonUpgradePodFailed, tt.chain...)}
			}
			plan, err := planRestore(sb, tt.pod, attemptB, tt.resumed, tt.own, func() ([]agentsv1alpha1.Checkpoint, error) {
				listed++
				return tt.list, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			switch {
			case plan.from != nil:
				got = plan.from.Status.CheckpointID
			case plan.fresh:
				got = "fresh"
			default:
				got = "problem: " + plan.problem
			}
			if strings.HasPrefix(tt.want, "problem: ") {
				if !strings.HasPrefix(got, "problem: ") || !strings.Contains(got, strings.TrimPrefix(tt.want, "problem: ")) {
					t.Errorf("plan = %q, want a problem containing %q", got, strings.TrimPrefix(tt.want, "problem: "))
				}
				if !strings.Contains(got, upgrade.RecreateOnly) {
					// kubectl molt retry and the ops's condition tell such a
					// failure by it (upgrade.OnlyRecreateResumes).
					t.Errorf("plan = %q, a problem no CheckpointRestore resumes; want it to say %q", got, upgrade.RecreateOnly)
				}
			} else if got != tt.want {
				t.Errorf("plan = %q (%s), want %q", got, plan.why, tt.want)
			}
			if tt.noList && listed > 0 {
				t.Errorf("listed the sandbox's checkpoints %d times, want none for this decision", listed)
			}
			if listed > 1 {
				t.Errorf("listed the sandbox's checkpoints %d times, want at most once", listed)
			}
		})
	}
}

// A list that fails is an error, not "nothing to restore".
func TestPlanRestoreListError(t *testing.T) {
	sb := restoreSandbox()
	boom := errors.New("forbidden")
	_, err := planRestore(sb, nil, attemptB, attemptA, nil, func() ([]agentsv1alpha1.Checkpoint, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the list's error", err)
	}
}

// The label value names the sandbox when the name fits, and is a valid, distinct,
// stable label value when it does not.
func TestCheckpointSandboxLabel(t *testing.T) {
	long := strings.Repeat("a", 40) + "-" + strings.Repeat("b", 60)
	tests := []struct {
		name, sandbox string
		verbatim      bool
	}{
		{name: "short", sandbox: "box-0", verbatim: true},
		{name: "63 characters", sandbox: strings.Repeat("x", 63), verbatim: true},
		{name: "64 characters", sandbox: strings.Repeat("x", 64)},
		{name: "253 characters with dots", sandbox: strings.Repeat("a.", 126) + "z"},
		{name: "long, prefix ends in a dash", sandbox: strings.Repeat("a", 39) + "-" + strings.Repeat("c", 30)},
		{name: "long", sandbox: long},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := upgrade.CheckpointSandboxLabel(tt.sandbox)
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Errorf("label value %q is invalid: %v", v, errs)
			}
			if (v == tt.sandbox) != tt.verbatim {
				t.Errorf("label value %q for %q, verbatim = %v, want %v", v, tt.sandbox, v == tt.sandbox, tt.verbatim)
			}
			if !tt.verbatim && !strings.Contains(v, "_") {
				t.Errorf("shortened label value %q has no _, so it could be another sandbox's name", v)
			}
			if again := upgrade.CheckpointSandboxLabel(tt.sandbox); again != v {
				t.Errorf("label value not stable: %q then %q", v, again)
			}
			if prev, ok := seen[v]; ok {
				t.Errorf("label value %q for both %q and %q", v, prev, tt.sandbox)
			}
			seen[v] = tt.sandbox
		})
	}
	if a, b := upgrade.CheckpointSandboxLabel(long+"1"), upgrade.CheckpointSandboxLabel(long+"2"); a == b {
		t.Errorf("names differing only past the prefix share label value %q", a)
	}
}

// upgradingStatus is a status that describes attempt at reason.
func upgradingStatus(attempt, reason string) agentsv1alpha1.SandboxStatus {
	return agentsv1alpha1.SandboxStatus{Conditions: []metav1.Condition{
		{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
		{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: attempt},
	}}
}

// Checkpoints are deleted after the attempt that took them Succeeded, and only then.
func TestCheckpointsDone(t *testing.T) {
	mark := map[string]string{upgrade.AnnotationUpgradeStrategy: upgrade.StrategyValue(attemptA)}
	tests := []struct {
		name        string
		annotations map[string]string
		status      agentsv1alpha1.SandboxStatus
		want        bool
	}{
		{name: "succeeded", annotations: mark, status: upgradingStatus(attemptA, agentsv1alpha1.UpgradingReasonSucceeded), want: true},
		{name: "failed in UpgradePod: kept, they hold the workspace", annotations: mark, status: upgradingStatus(attemptA, agentsv1alpha1.UpgradingReasonUpgradePodFailed)},
		{name: "failed in PostUpgrade: kept", annotations: mark, status: upgradingStatus(attemptA, agentsv1alpha1.UpgradingReasonPostUpgradeFailed)},
		{name: "failed in Checkpointing: kept", annotations: mark, status: upgradingStatus(attemptA, agentsv1alpha1.UpgradingReasonCheckpointFailed)},
		{name: "in progress", annotations: mark, status: upgradingStatus(attemptA, agentsv1alpha1.UpgradingReasonUpgradePod)},
		{name: "another attempt succeeded (the mark is not its own)", annotations: mark, status: upgradingStatus(attemptB, agentsv1alpha1.UpgradingReasonSucceeded)},
		{name: "a Recreate attempt that continued the marked one succeeded: kept (its pod may have started empty)", annotations: map[string]string{
			upgrade.AnnotationUpgradeStrategy: upgrade.StrategyValue(attemptA),
			upgrade.AnnotationResumes:         upgrade.ResumesValue(attemptB, attemptA, agentsv1alpha1.UpgradingReasonUpgradePodFailed),
		}, status: upgradingStatus(attemptB, agentsv1alpha1.UpgradingReasonSucceeded)},
		{name: "no mark", status: upgradingStatus(attemptA, agentsv1alpha1.UpgradingReasonSucceeded)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := restoreSandbox()
			sb.Annotations, sb.Status = tt.annotations, tt.status
			if _, _, got := checkpointsDone(sb); got != tt.want {
				t.Errorf("checkpointsDone = %v, want %v", got, tt.want)
			}
		})
	}
}

// Only the pod of the attempt that the status describes is reported on, and under
// CheckpointRestore only one that restores a checkpoint.
func TestReportSkip(t *testing.T) {
	sb := func(attempt, reason, ops string, annotations map[string]string) *agentsv1alpha1.Sandbox {
		s := restoreSandbox()
		s.Status = upgradingStatus(attempt, reason)
		s.Annotations = annotations
		if ops != "" {
			s.Labels = map[string]string{agentsv1alpha1.LabelUpdateOps: ops}
		}
		return s
	}
	pod := func(attempt, ops, restoreFrom string) *corev1.Pod {
		p := buildPod(restoreSandbox(), "rev", attempt, ops)
		if restoreFrom != "" {
			p.Annotations[upgrade.AnnotationRestoreFrom] = restoreFrom
		}
		return p
	}
	checkpointing := map[string]string{upgrade.AnnotationUpgradeStrategy: upgrade.StrategyValue(attemptB)}
	direct := upgrade.DirectAttemptPrefix + "rev-2"
	tests := []struct {
		name   string
		sb     *agentsv1alpha1.Sandbox
		pod    *corev1.Pod
		report bool
	}{
		{name: "the current attempt's pod", sb: sb(attemptB, agentsv1alpha1.UpgradingReasonUpgradePod, "ops", nil), pod: pod(attemptB, "ops", ""), report: true},
		{name: "an older attempt's pod, its ops deleted and created again under the same name", sb: sb(attemptB, agentsv1alpha1.UpgradingReasonPreUpgrade, "ops", nil), pod: pod(attemptA, "ops", "")},
		{name: "an older attempt's pod while the new attempt is in UpgradePod", sb: sb(attemptB, agentsv1alpha1.UpgradingReasonUpgradePod, "ops", nil), pod: pod(attemptA, "ops", "")},
		{name: "the pod the new attempt continues on at PostUpgrade (the patcher reports it)", sb: sb(attemptB, agentsv1alpha1.UpgradingReasonPostUpgrade, "ops", map[string]string{upgrade.AnnotationResumes: upgrade.ResumesValue(attemptB, attemptA, agentsv1alpha1.UpgradingReasonPostUpgradeFailed)}), pod: pod(attemptA, "ops", "")},
		{name: "the status names no attempt yet", sb: &agentsv1alpha1.Sandbox{ObjectMeta: restoreSandbox().ObjectMeta}, pod: pod(attemptB, "", "")},
		{name: "the current direct attempt's pod", sb: sb(direct, agentsv1alpha1.UpgradingReasonUpgradePod, "", nil), pod: pod(direct, "", ""), report: true},
		{name: "an older direct attempt's pod", sb: sb(direct, agentsv1alpha1.UpgradingReasonUpgradePod, "", nil), pod: pod(upgrade.DirectAttemptPrefix+"rev-1", "", "")},
		{name: "sandbox taken by another ops", sb: sb(attemptB, agentsv1alpha1.UpgradingReasonUpgradePod, "other", nil), pod: pod(attemptB, "ops", "")},
		{name: "its ops label removed mid-attempt, the claim still the ops's", sb: sb(attemptB, agentsv1alpha1.UpgradingReasonUpgradePod, "", map[string]string{upgrade.AnnotationClaim: upgrade.ClaimValue("ops", attemptB)}), pod: pod(attemptB, "ops", ""), report: true},
		{name: "its ops label removed, the claim of another attempt", sb: sb(attemptB, agentsv1alpha1.UpgradingReasonUpgradePod, "", map[string]string{upgrade.AnnotationClaim: upgrade.ClaimValue("ops", attemptA)}), pod: pod(attemptB, "ops", "")},
		{name: "attempt past UpgradePod", sb: sb(attemptB, agentsv1alpha1.UpgradingReasonUpgradePodFailed, "ops", nil), pod: pod(attemptB, "ops", "")},
		{name: "CheckpointRestore pod that restores a checkpoint", sb: sb(attemptB, agentsv1alpha1.UpgradingReasonUpgradePod, "ops", checkpointing), pod: pod(attemptB, "ops", "id-a"), report: true},
		{name: "CheckpointRestore pod that restores nothing", sb: sb(attemptB, agentsv1alpha1.UpgradingReasonUpgradePod, "ops", checkpointing), pod: pod(attemptB, "ops", "")},
		{name: "a plain pod", sb: sb(attemptB, agentsv1alpha1.UpgradingReasonUpgradePod, "ops", nil), pod: pod("", "", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			skip := reportSkip(tt.sb, tt.pod)
			if (skip == "") != tt.report {
				t.Errorf("reportSkip = %q, want report %v", skip, tt.report)
			}
		})
	}
}

// Under CheckpointRestore a pod of the attempt that restores no checkpoint is not
// adopted.
func TestIsAttemptPodUnderCheckpointRestore(t *testing.T) {
	sb := restoreSandbox()
	checkpointing := map[string]string{upgrade.AnnotationUpgradeStrategy: upgrade.StrategyValue(attemptB)}
	tests := []struct {
		name        string
		annotations map[string]string
		restoreFrom string
		want        bool
	}{
		{name: "Recreate: adopted", want: true},
		{name: "CheckpointRestore, restores a checkpoint: adopted", annotations: checkpointing, restoreFrom: "id-a", want: true},
		{name: "CheckpointRestore, restores nothing: replaced", annotations: checkpointing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sb.DeepCopy()
			s.Annotations = tt.annotations
			pod := buildPod(s, "rev", attemptB, "ops")
			if tt.restoreFrom != "" {
				pod.Annotations[upgrade.AnnotationRestoreFrom] = tt.restoreFrom
			}
			d := events.Data{Attempt: attemptB, OldPodUID: "uid-of-the-pod-it-replaces"}
			if got := isAttemptPod(pod, s, "rev", d); got != tt.want {
				t.Errorf("isAttemptPod = %v, want %v", got, tt.want)
			}
		})
	}
}

// A restore that failed names the checkpoint that keeps the workspace, unless
// that checkpoint is gone (deleted before the restore): then the note says so
// instead of sending the user to resume from it.
func TestCheckpointNoteSaysWhenTheCheckpointIsGone(t *testing.T) {
	sb := restoreSandbox()
	kept := testCheckpoint(sb, attemptA, 0, agentsv1alpha1.CheckpointSucceeded, "ck-1")
	kept.Labels[upgrade.LabelCheckpointSandbox] = upgrade.CheckpointSandboxLabel(sb.Name)
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		want    string
	}{
		{"the checkpoint is there", []runtime.Object{&kept}, upgrade.CheckpointKeptNote(sb.Namespace, sb.Name, "ck-1")},
		{"the checkpoint is gone", nil, upgrade.CheckpointGoneNote(sb.Namespace, sb.Name, "ck-1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cycler{agents: agentsfake.NewSimpleClientset(tc.objects...)}
			got := c.checkpointNote(context.Background(), sb, "ck-1")
			if got != tc.want {
				t.Errorf("note = %q, want %q", got, tc.want)
			}
			if !upgrade.HasCheckpointNote(got) {
				t.Errorf("upgrade.HasCheckpointNote(%q) = false: statusagg would add the kept note to it", got)
			}
		})
	}
}
