package upgrade

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// Every Upgrading reason of the wire contract, so a new one cannot be
// forgotten by the table.
var allReasons = []string{
	agentsv1alpha1.UpgradingReasonResuming, agentsv1alpha1.UpgradingReasonResumeSucceed,
	agentsv1alpha1.UpgradingReasonPreUpgrade, agentsv1alpha1.UpgradingReasonPreUpgradeFailed,
	agentsv1alpha1.UpgradingReasonCheckpointing, agentsv1alpha1.UpgradingReasonCheckpointFailed,
	agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonUpgradePodFailed,
	agentsv1alpha1.UpgradingReasonPostUpgrade, agentsv1alpha1.UpgradingReasonPostUpgradeFailed,
	agentsv1alpha1.UpgradingReasonSucceeded,
}

func TestStageTable(t *testing.T) {
	cases := []struct {
		reason     string
		rank       int
		inProgress bool
		terminal   bool
		stageOf    string // StageOfFailure
	}{
		{"Resuming", 1, true, false, ""},
		{"ResumeSucceed", 2, true, false, ""},
		{"PreUpgrade", 3, true, false, ""},
		{"PreUpgradeFailed", 3, false, true, "PreUpgrade"},
		{"Checkpointing", 4, true, false, ""},
		{"CheckpointFailed", 4, false, true, "Checkpointing"},
		{"UpgradePod", 5, true, false, ""},
		{"UpgradePodFailed", 5, false, true, "UpgradePod"},
		{"PostUpgrade", 6, true, false, ""},
		{"PostUpgradeFailed", 6, false, true, "PostUpgrade"},
		{"Succeeded", 7, false, true, ""},
		{"Bogus", 0, false, false, ""},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			seen[tc.reason] = true
			if got := Rank(tc.reason); got != tc.rank {
				t.Errorf("Rank = %d, want %d", got, tc.rank)
			}
			if got := InProgress(tc.reason); got != tc.inProgress {
				t.Errorf("InProgress = %v, want %v", got, tc.inProgress)
			}
			if got := Terminal(tc.reason); got != tc.terminal {
				t.Errorf("Terminal = %v, want %v", got, tc.terminal)
			}
			if got := StageOfFailure(tc.reason); got != tc.stageOf {
				t.Errorf("StageOfFailure = %q, want %q", got, tc.stageOf)
			}
		})
	}
	for _, r := range allReasons {
		if !seen[r] {
			t.Errorf("reason %s has no row in this test", r)
		}
	}
}

func TestFailedReason(t *testing.T) {
	cases := []struct{ stage, want string }{
		{"Resuming", "PreUpgradeFailed"},
		{"PreUpgrade", "PreUpgradeFailed"},
		{"Checkpointing", "CheckpointFailed"},
		{"UpgradePod", "UpgradePodFailed"},
		{"PostUpgrade", "PostUpgradeFailed"},
		{"Succeeded", ""},
	}
	for _, tc := range cases {
		if got := FailedReason(tc.stage); got != tc.want {
			t.Errorf("FailedReason(%s) = %q, want %q", tc.stage, got, tc.want)
		}
	}
}

func TestPast(t *testing.T) {
	cases := []struct {
		reason, stage string
		want          bool
	}{
		{"PreUpgrade", "PreUpgrade", false},
		{"UpgradePod", "PreUpgrade", true},
		{"PreUpgrade", "UpgradePod", false},
		{"PostUpgrade", "UpgradePod", true},
		{"Succeeded", "PostUpgrade", true},
		// An ended attempt is past every stage, whatever stage it failed in:
		// nothing is redone for it (a new attempt resumes it).
		{"PreUpgradeFailed", "UpgradePod", true},
		{"UpgradePodFailed", "PreUpgrade", true},
		{"UpgradePodFailed", "UpgradePod", true},
		{"PostUpgradeFailed", "PostUpgrade", true},
		{"", "PreUpgrade", false},
	}
	for _, tc := range cases {
		if got := Past(tc.reason, tc.stage); got != tc.want {
			t.Errorf("Past(%q, %q) = %v, want %v", tc.reason, tc.stage, got, tc.want)
		}
	}
}

func pod(attempt, revision string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sb", Labels: map[string]string{agentsv1alpha1.LabelPodTemplateHash: revision}, Annotations: map[string]string{}}}
	if attempt != "" {
		p.Annotations[AnnotationPodAttempt] = attempt
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return p
}

// TestResumeAt covers every failed reason against the three kinds of pod a
// failed sandbox can have: the original one, one built by the failed
// attempt, none.
func TestResumeAt(t *testing.T) {
	original := pod("", "old", true)
	earlierAttempt := pod("older-attempt", "old", true) // built by a successful earlier upgrade: original for this one
	builtReady := pod("A", "target", true)
	builtOld := pod("A", "other", true)
	builtNotReady := pod("A", "target", false)
	kept := pod("A", "target", true) // the original pod, kept by A as it ran the target already
	kept.Annotations[AnnotationPodKept] = "A"
	notRestored := pod("A", "target", true) // rebuilt from A's checkpoint, Ready before the restore
	notRestored.Annotations[AnnotationRestoreFrom] = "ckpt-1"
	restored := notRestored.DeepCopy()
	restored.Annotations[AnnotationRestored] = "ckpt-1"
	cases := []struct {
		name   string
		reason string
		pod    *corev1.Pod
		want   string
	}{
		{"post failed, the original pod the failed attempt kept: backed up again", "PostUpgradeFailed", kept, "PreUpgrade"},
		{"pre failed, original pod", "PreUpgradeFailed", original, "PreUpgrade"},
		{"pre failed, pod of an earlier upgrade", "PreUpgradeFailed", earlierAttempt, "PreUpgrade"},
		{"pre failed, pod rebuilt during the attempt", "PreUpgradeFailed", builtReady, "UpgradePod"},
		{"pre failed, no pod", "PreUpgradeFailed", nil, "UpgradePod"},
		{"checkpoint failed, original pod", "CheckpointFailed", original, "PreUpgrade"},
		{"checkpoint failed, built pod", "CheckpointFailed", builtReady, "UpgradePod"},
		{"upgrade pod failed before the delete (original pod kept)", "UpgradePodFailed", original, "PreUpgrade"},
		{"upgrade pod failed after the delete, new pod", "UpgradePodFailed", builtNotReady, "UpgradePod"},
		{"upgrade pod failed, no pod", "UpgradePodFailed", nil, "UpgradePod"},
		{"post failed, new pod on target", "PostUpgradeFailed", builtReady, "PostUpgrade"},
		{"post failed, new pod on another revision", "PostUpgradeFailed", builtOld, "UpgradePod"},
		{"post failed, new pod not ready", "PostUpgradeFailed", builtNotReady, "UpgradePod"},
		{"post failed, no pod", "PostUpgradeFailed", nil, "UpgradePod"},
		{"post failed, new pod Ready, its checkpoint not restored yet", "PostUpgradeFailed", notRestored, "UpgradePod"},
		{"post failed, new pod Ready and restored", "PostUpgradeFailed", restored, "PostUpgrade"},
		{"post failed, original pod back", "PostUpgradeFailed", original, "PreUpgrade"},
		{"not a failure", "UpgradePod", builtReady, ""},
		{"succeeded", "Succeeded", builtReady, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ResumeAt(tc.reason, []string{"A"}, tc.pod, "target"); got != tc.want {
				t.Fatalf("ResumeAt(%s) = %q, want %q", tc.reason, got, tc.want)
			}
		})
	}
}

// TestResumeAtAfterAResumeFailedAgain: A failed in PostUpgrade on the pod it
// built, B resumed it there and failed too (building nothing), and C now
// resumes B. A's pod holds no workspace: C must not back it up.
func TestResumeAtAfterAResumeFailedAgain(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{}
	sb.Annotations = map[string]string{AnnotationResumes: ResumesValue("B", "A", "PostUpgradeFailed")}
	// What the selector records when it admits C: B and the chain B continued.
	sb.Annotations[AnnotationResumes] = ResumesValue("C", "B", "PostUpgradeFailed", ResumedChain(sb, "B")...)
	if got := ResumedChain(sb, "C"); !slices.Equal(got, []string{"B", "A"}) {
		t.Fatalf("ResumedChain(C) = %v, want [B A]", got)
	}
	builtByA := pod("A", "target", true)
	if got := ResumeAt("PostUpgradeFailed", ResumedChain(sb, "C"), builtByA, "target"); got != "PostUpgrade" {
		t.Fatalf("ResumeAt = %q, want PostUpgrade (never PreUpgrade on A's pod)", got)
	}
	if !BuiltByResumed(builtByA, sb, "C", "B") || BuiltByResumed(pod("", "old", true), sb, "C", "B") {
		t.Fatal("BuiltByResumed must name A's pod and only it")
	}
	if got := ResumeAt("PostUpgradeFailed", []string{"B"}, builtByA, "target"); got != "PreUpgrade" {
		t.Fatalf("with B alone, ResumeAt = %q; the test no longer shows the chain matters", got)
	}
}

// TestResumeAfterAnAbandonedResume: A failed in UpgradePod (its backup is the
// good copy); B resumed it, rebuilt the pod with an empty workspace, and its
// ops was deleted before statusagg recorded B, so the status still shows A
// failed. C resumes A: B's pod must count as built by a failed attempt, or
// preUpgrade would back it up over A's backup.
func TestResumeAfterAnAbandonedResume(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{}
	sb.Annotations = map[string]string{AnnotationResumes: ResumesValue("B", "A", "UpgradePodFailed", "Z")}
	if got := ChainBehind(sb, "A"); !slices.Equal(got, []string{"B", "Z"}) {
		t.Fatalf("ChainBehind(A) = %v, want [B Z]: the abandoned B and what A continued", got)
	}
	sb.Annotations[AnnotationResumes] = ResumesValue("C", "A", "UpgradePodFailed", ChainBehind(sb, "A")...)
	builtByB := pod("B", "target", true)
	if got := ResumeAt("UpgradePodFailed", ResumedChain(sb, "C"), builtByB, "target"); got == "PreUpgrade" {
		t.Fatalf("ResumeAt = %q: B's pod would be backed up over A's backup", got)
	}
	if !BuiltByResumed(builtByB, sb, "C", "A") {
		t.Fatal("BuiltByResumed must name B's pod")
	}
	// The usual record (A itself continued Z), with Z's reason kept: ResumedChain names Z alone.
	sb.Annotations[AnnotationResumes] = ResumesValue("A", "Z", "PreUpgradeFailed")
	if got := ChainBehind(sb, "A"); !slices.Equal(got, []string{"Z=PreUpgradeFailed"}) {
		t.Fatalf("ChainBehind(A) = %v, want [Z=PreUpgradeFailed]", got)
	}
	sb.Annotations[AnnotationResumes] = ResumesValue("C", "A", "PreUpgradeFailed", ChainBehind(sb, "A")...)
	if got := ResumedChain(sb, "C"); !slices.Equal(got, []string{"A", "Z"}) {
		t.Fatalf("ResumedChain(C) = %v, want [A Z]", got)
	}
	if got := ChainBehind(&agentsv1alpha1.Sandbox{}, "A"); got != nil {
		t.Fatalf("ChainBehind without a record = %v", got)
	}
}

func TestRedriveRefusal(t *testing.T) {
	at := func(attempt, reason string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sb"}}
		if attempt != "" {
			sb.Status.Conditions = []metav1.Condition{
				{Type: ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: attempt},
				{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
			}
		}
		return sb
	}
	for _, c := range []struct {
		attempt, reason, stage string
		refused                bool
	}{
		// What the watchdog re-drives: the stage the status shows.
		{"a1", agentsv1alpha1.UpgradingReasonPreUpgrade, agentsv1alpha1.UpgradingReasonResuming, false},
		{"a1", agentsv1alpha1.UpgradingReasonResuming, agentsv1alpha1.UpgradingReasonResuming, false},
		{"a1", agentsv1alpha1.UpgradingReasonCheckpointing, agentsv1alpha1.UpgradingReasonCheckpointing, false},
		{"a1", agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonCheckpointing, false},
		{"a1", agentsv1alpha1.UpgradingReasonPostUpgrade, agentsv1alpha1.UpgradingReasonPostUpgrade, false},
		// Later or ended: the handler's own Past check skips it.
		{"a1", agentsv1alpha1.UpgradingReasonSucceeded, agentsv1alpha1.UpgradingReasonCheckpointing, false},
		{"a1", agentsv1alpha1.UpgradingReasonPreUpgradeFailed, agentsv1alpha1.UpgradingReasonPostUpgrade, false},
		// Not the watchdog's: an earlier stage, or an attempt the status does not show.
		{"a1", agentsv1alpha1.UpgradingReasonPreUpgrade, agentsv1alpha1.UpgradingReasonCheckpointing, true},
		{"a1", agentsv1alpha1.UpgradingReasonResumeSucceed, agentsv1alpha1.UpgradingReasonCheckpointing, true},
		{"a1", agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonPostUpgrade, true},
		{"", "", agentsv1alpha1.UpgradingReasonResuming, true},
		{"a0", agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonCheckpointing, true},
	} {
		got := RedriveRefusal(at(c.attempt, c.reason), "a1", c.stage)
		if (got != "") != c.refused {
			t.Errorf("status at %q %s, re-drive of %s: refusal %q, want refused %v", c.attempt, c.reason, c.stage, got, c.refused)
		}
	}
}
