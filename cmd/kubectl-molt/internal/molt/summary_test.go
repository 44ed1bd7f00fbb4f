package molt

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var t0 = time.Date(2026, 7, 14, 10, 0, 0, 0, time.UTC)

// fixture is an ops of 10 sandboxes 3 minutes in: 4 updated, 1 failed in
// preUpgrade, 3 in flight, 2 not started.
func fixture() (*agentsv1alpha1.SandboxUpdateOps, []agentsv1alpha1.Sandbox) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "default", UID: "u1", CreationTimestamp: metav1.NewTime(t0)}}
	ops.Status = agentsv1alpha1.SandboxUpdateOpsStatus{Phase: agentsv1alpha1.SandboxUpdateOpsUpdating, Replicas: 10, UpdatedReplicas: 4, UpdatingReplicas: 3, FailedReplicas: 1}
	box := func(name, reason, message string, since time.Duration) agentsv1alpha1.Sandbox {
		sb := agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "up"}}}
		if reason != "" {
			at := metav1.NewTime(t0.Add(3*time.Minute - since))
			sb.Status.Conditions = []metav1.Condition{
				{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: "u1", LastTransitionTime: at},
				{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason, Message: message, LastTransitionTime: at},
			}
		}
		return sb
	}
	sandboxes := []agentsv1alpha1.Sandbox{
		box("box-0", agentsv1alpha1.UpgradingReasonSucceeded, "", time.Minute),
		box("box-1", agentsv1alpha1.UpgradingReasonSucceeded, "", time.Minute),
		box("box-2", agentsv1alpha1.UpgradingReasonSucceeded, "", time.Minute),
		box("box-3", agentsv1alpha1.UpgradingReasonSucceeded, "", time.Minute),
		box("box-4", agentsv1alpha1.UpgradingReasonPreUpgradeFailed, "hook failed with exit code 3, stderr: tar: /backup: No space left on device, stdout: ", 30*time.Second),
		box("box-5", agentsv1alpha1.UpgradingReasonUpgradePod, "", 40*time.Second),
		box("box-6", agentsv1alpha1.UpgradingReasonPreUpgrade, "", 5*time.Second),
		box("box-7", "", "", 0),
	}
	return ops, sandboxes
}

func TestSummarize(t *testing.T) {
	ops, sandboxes := fixture()
	s := summarize(ops, sandboxes, t0.Add(3*time.Minute), 5)
	if s.NotStarted != 2 || s.Updated != 4 || s.Failed != 1 || s.Updating != 3 {
		t.Errorf("counters %+v", s)
	}
	want := []StageCount{{stageAdmitted, 1}, {"PreUpgrade", 1}, {"UpgradePod", 1}, {"PostUpgrade", 0}}
	if len(s.Stages) != len(want) {
		t.Fatalf("stages %v, want %v", s.Stages, want)
	}
	for i := range want {
		if s.Stages[i] != want[i] {
			t.Errorf("stage %d = %v, want %v", i, s.Stages[i], want[i])
		}
	}
	if s.InFlight[0].Name != "box-5" || s.InFlight[0].AgeSeconds != 40 {
		t.Errorf("slowest in flight %+v, want box-5 40s", s.InFlight)
	}
	if len(s.FailedSandboxes) != 1 || s.FailedSandboxes[0].Stderr != "tar: /backup: No space left on device" {
		t.Errorf("failed %+v", s.FailedSandboxes)
	}
	if s.PerMinute < 1.33 || s.PerMinute > 1.34 || s.ETASeconds == nil || int(*s.ETASeconds) != 225 {
		t.Errorf("throughput %v/min, ETA %v", s.PerMinute, s.ETASeconds)
	}
}

// A paused ops has no ETA, and its plain line says it is paused.
func TestPausedHasNoETA(t *testing.T) {
	ops, sandboxes := fixture()
	ops.Spec.Paused = true
	s := summarize(ops, sandboxes, t0.Add(3*time.Minute), 5)
	if s.ETASeconds != nil {
		t.Errorf("ETA %v while paused, want none", *s.ETASeconds)
	}
	if line := plainLine(s) + plainExtra(s); !strings.Contains(line, "Updating (paused: no new sandbox is admitted)") || !strings.Contains(line, "ETA -") {
		t.Errorf("plain line %q, want it to say paused and give no ETA", line)
	}
}

// An ended ops says how long it took, not a throughput of 0.0/min and an
// ETA, once it updated none.
func TestEndedSaysHowLongItTook(t *testing.T) {
	ops, sandboxes := fixture()
	ops.Status.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
	for _, updated := range []int32{0, 4} {
		ops.Status.UpdatedReplicas = updated
		s := summarize(ops, sandboxes, t0.Add(3*time.Minute), 5)
		extra, screen := plainExtra(s), renderScreen(s, false)
		if strings.Contains(extra, "ETA") || strings.Contains(screen, "ETA") || !strings.Contains(extra, "ended after 3m") || !strings.Contains(screen, "ended after 3m") {
			t.Errorf("updated %d: plain %q, screen %q: want how long it took, and no ETA", updated, extra, screen)
		}
		if got := strings.Contains(extra, "/min"); got != (updated > 0) {
			t.Errorf("updated %d: plain %q: throughput shown %v, want %v", updated, extra, got, updated > 0)
		}
	}
}

// An ops being deleted says so, with no ETA.
func TestDeletingSaysWhatItWaitsFor(t *testing.T) {
	ops, sandboxes := fixture()
	ops.DeletionTimestamp = &metav1.Time{Time: t0}
	s := summarize(ops, sandboxes, t0.Add(3*time.Minute), 5)
	if line := plainLine(s) + plainExtra(s); !strings.Contains(line, "being deleted: waiting for 3 sandboxes") || !strings.Contains(line, "ETA -") {
		t.Errorf("plain line %q, want it to say the ops is being deleted and give no ETA", line)
	}
	// None in a stage: what the release waits for, and where to look.
	idle := s
	idle.Updating = 0
	if n := note(idle); !strings.Contains(n, "no sandbox is in a stage") || !strings.Contains(n, "is the selector running?") {
		t.Errorf("note with none in a stage %q, want the release and where to look", n)
	}
	// The status stopped at the delete (3 updating); one of them has ended
	// since and was released: it is not counted as not started.
	released := slices.DeleteFunc(slices.Clone(sandboxes), func(sb agentsv1alpha1.Sandbox) bool { return sb.Name == "box-6" })
	s = summarize(ops, released, t0.Add(3*time.Minute), 5)
	if s.NotStarted != 2 || s.Released != 1 || s.Updating != 2 || !strings.Contains(plainLine(s), "2 not started, 1 ended and released since the delete") {
		t.Errorf("after a release: not started %d, released %d, updating %d, line %q; want 2, 1, 2", s.NotStarted, s.Released, s.Updating, plainLine(s))
	}
}

// A sandbox in UpgradePod for podWaitAfter or more shows what its new pod waits for
// (here: not scheduled), which its status says only at the stage's deadline; one in
// another stage, or younger, is not looked up.
func TestInFlightSaysWhatThePodWaitsFor(t *testing.T) {
	ops, sandboxes := fixture()
	s := summarize(ops, sandboxes, t0.Add(3*time.Minute), 5)
	var asked []string
	withPodWaits(context.Background(), &s, func(_ context.Context, name string) (*corev1.Pod, error) {
		asked = append(asked, name)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}}
		return pod, nil
	})
	if !slices.Equal(asked, []string{"box-5"}) {
		t.Fatalf("pods read: %v, want only box-5's (in UpgradePod for 40s)", asked)
	}
	if got := s.InFlight[0].WaitingFor; got != "not scheduled: Unschedulable - 0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector." {
		t.Errorf("box-5 waiting for %q", got)
	}
	if screen := renderScreen(s, false); !strings.Contains(screen, "WAITING FOR") || !strings.Contains(screen, "not scheduled: Unschedulable") {
		t.Errorf("screen does not show what box-5 waits for:\n%s", screen)
	}
}

// TestRenderGolden: the terminal screen (colours on) and the plain line.
func TestRenderGolden(t *testing.T) {
	ops, sandboxes := fixture()
	s := summarize(ops, sandboxes, t0.Add(3*time.Minute), 5)
	for name, got := range map[string]string{
		"screen.golden": renderScreen(s, true),
		"plain.golden":  plainLine(s) + plainExtra(s) + "\n",
	} {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run `go test ./internal/molt -update` to write it)", err)
		}
		if got != string(want) {
			t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
		}
	}
}

func TestRetrySpec(t *testing.T) {
	hook := &agentsv1alpha1.UpgradeAction{}
	ops := &agentsv1alpha1.SandboxUpdateOps{}
	ops.Spec.Paused = true
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{}}`)}
	ops.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook, PostUpgrade: hook}
	for _, tc := range []struct {
		name       string
		reasons    []string
		notStarted int
		postOnly   bool
	}{
		{"all failed in PostUpgrade", []string{"PostUpgradeFailed", "PostUpgradeFailed"}, 0, true},
		{"PostUpgrade and others not started", []string{"PostUpgradeFailed"}, 2, false},
		{"a PreUpgrade failure among them", []string{"PostUpgradeFailed", "PreUpgradeFailed"}, 0, false},
		{"only not started", nil, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, postOnly := retrySpec(ops, tc.reasons, tc.notStarted)
			if postOnly != tc.postOnly || spec.Paused {
				t.Fatalf("postOnly %v paused %v", postOnly, spec.Paused)
			}
			if postOnly && (len(spec.Patch.Raw) != 0 || spec.Lifecycle.PreUpgrade != nil || spec.Lifecycle.PostUpgrade == nil) {
				t.Errorf("a postUpgrade-only retry carries %+v", spec)
			}
			if !postOnly && (string(spec.Patch.Raw) != `{"spec":{}}` || spec.Lifecycle.PreUpgrade == nil) {
				t.Errorf("a full retry lost the patch or hooks: %+v", spec)
			}
		})
	}
}

func TestTemplateDiffShowsOnlyThePatch(t *testing.T) {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
	d, err := templateDiff(sb, []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v2"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `--- ns/b (current)
+++ ns/b (patched)
@@ -1,6 +1,6 @@
 metadata: {}
 spec:
   containers:
-  - image: img:v1
+  - image: img:v2
     name: sandbox
     resources: {}
`
	if d != want {
		t.Errorf("diff:\n%s\nwant:\n%s", d, want)
	}
	if d, _ := templateDiff(sb, nil); d != "" {
		t.Errorf("no patch gives a diff:\n%s", d)
	}
}

func TestFitScreen(t *testing.T) {
	screen := "a\nb\nc\nd\ne\n"
	if got := fitScreen(screen, 0); got != screen {
		t.Errorf("unknown height changed the screen: %q", got)
	}
	if got := fitScreen(screen, 10); got != screen {
		t.Errorf("a screen that fits changed: %q", got)
	}
	if got, want := fitScreen(screen, 4), "a\nb\n… 3 more lines: enlarge the terminal, or use -o json\n"; got != want {
		t.Errorf("fitScreen = %q, want %q", got, want)
	}
}

// abort's final counts come from the sandboxes when the ops's counters
// have not caught up with the last attempts to end.
func TestFinalCountsFromTheSandboxes(t *testing.T) {
	ops, sandboxes := fixture()
	// box-5 and box-6 have since succeeded, box-7 failed; the status still
	// says 4 updated, 1 failed.
	for i, reason := range map[int]string{5: agentsv1alpha1.UpgradingReasonSucceeded, 6: agentsv1alpha1.UpgradingReasonSucceeded, 7: agentsv1alpha1.UpgradingReasonUpgradePodFailed} {
		sandboxes[i].Status.Conditions = []metav1.Condition{
			{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: "u1"},
			{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
		}
	}
	s := summarize(ops, sandboxes, t0.Add(3*time.Minute), 5)
	if updated, failed, notStarted := finalCounts(s); updated != 6 || failed != 2 || notStarted != 2 {
		t.Errorf("finalCounts = %d updated, %d failed, %d not started; want 6, 2, 2", updated, failed, notStarted)
	}
	// Updated sandboxes that have left the ops keep the status's count.
	if updated, _, _ := finalCounts(summarize(ops, sandboxes[5:], t0.Add(3*time.Minute), 5)); updated != 4 {
		t.Errorf("finalCounts without box-0 to box-4 = %d updated, want the status's 4", updated)
	}
}

// A postUpgrade-only retry would also resume another ops's sandbox that
// failed before its backup: alsoResumed names it, so the retry keeps
// preUpgrade. The failed ops's own sandboxes and up-to-date ones are not named.
func TestAlsoResumedNamesOtherFailedSandboxes(t *testing.T) {
	hook := &agentsv1alpha1.UpgradeAction{}
	next := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up-retry", Namespace: "ns"}}
	next.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p"}}
	next.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PostUpgrade: hook}
	box := func(name, opsLabel, reason string) agentsv1alpha1.Sandbox {
		sb := agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"pool": "p"}}}
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v2"}}}}
		sb.Status.Phase = agentsv1alpha1.SandboxRunning
		if opsLabel != "" {
			sb.Labels[agentsv1alpha1.LabelUpdateOps] = opsLabel
		}
		if reason != "" {
			sb.Status.Phase = agentsv1alpha1.SandboxUpgrading
			sb.Status.Conditions = []metav1.Condition{{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason}}
		}
		return sb
	}
	all := []agentsv1alpha1.Sandbox{
		box("own", "up", agentsv1alpha1.UpgradingReasonPostUpgradeFailed),
		box("others-pre", "", agentsv1alpha1.UpgradingReasonPreUpgradeFailed),
		box("fine", "", ""),
	}
	if got := alsoResumed(next, all, []string{"own"}); !slices.Equal(got, []string{"others-pre"}) {
		t.Errorf("alsoResumed = %v, want [others-pre]", got)
	}
	if got := alsoResumed(next, all[:1], []string{"own"}); len(got) != 0 {
		t.Errorf("alsoResumed with only the ops's own sandbox = %v, want none", got)
	}
}

// While the ops runs, the counters agree with the stages shown: the status's
// are written at most every --ops-status-interval, and a status that still
// says 0 updating beside 3 sandboxes in a stage reads as a contradiction.
// Updated keeps the status's higher count (a sandbox deleted after its
// upgrade stays counted).
func TestCountersAgreeWithTheStagesWhileRunning(t *testing.T) {
	ops, sandboxes := fixture()
	ops.Status.UpdatingReplicas, ops.Status.UpdatedReplicas, ops.Status.FailedReplicas = 0, 5, 0
	s := summarize(ops, sandboxes, t0.Add(3*time.Minute), 5)
	if s.Updating != 3 || s.Updated != 5 || s.Failed != 1 || s.NotStarted != 1 || s.Total != 10 {
		t.Errorf("updating %d, updated %d, failed %d, not started %d of %d; want 3, 5 (the status's), 1, 1 of 10",
			s.Updating, s.Updated, s.Failed, s.NotStarted, s.Total)
	}
	ops.Status.Phase = agentsv1alpha1.SandboxUpdateOpsCompleted
	if s := summarize(ops, sandboxes, t0.Add(3*time.Minute), 5); s.Updating != 0 || s.Updated != 5 {
		t.Errorf("finished: updating %d, updated %d; want the status's final 0 and 5", s.Updating, s.Updated)
	}
}

// A Failed ops can still have a sandbox in a stage (admitted in the instant
// statusagg decided Failed): retry waits for it rather than leave it out.
func TestStillInFlightNamesTheSandboxesInAStage(t *testing.T) {
	ops, sandboxes := fixture()
	ops.Status.Phase = agentsv1alpha1.SandboxUpdateOpsFailed
	if got := stillInFlight(ops, sandboxes); !slices.Equal(got, []string{"box-5", "box-6", "box-7"}) {
		t.Errorf("stillInFlight = %v, want the two sandboxes in a stage and the one admitted [box-5 box-6 box-7]", got)
	}
	if got := stillInFlight(ops, sandboxes[:5]); len(got) != 0 {
		t.Errorf("stillInFlight of updated and failed sandboxes = %v, want none", got)
	}
}

// A retry carries what it retries, and an added container the user already
// resumed the failed ops over is not paused for again.
func TestRetryOpsKeepsTheResumedMisspelling(t *testing.T) {
	ops, _ := fixture()
	ops.Labels = map[string]string{"team": "a"}
	ops.Annotations = map[string]string{upgrade.AnnotationMisspeltContainer: "containers/sandbox2 (1 edit from containers/sandbox)", upgrade.AnnotationMisspeltPausedAt: "2"}
	next := retryOps(ops, "up-retry", ops.Spec)
	if next.Name != "up-retry" || next.Namespace != "default" || next.Labels["team"] != "a" || next.Annotations[AnnotationRetryOf] != "up" ||
		next.Annotations[upgrade.AnnotationMisspeltContainer] != ops.Annotations[upgrade.AnnotationMisspeltContainer] {
		t.Errorf("retry ops %+v, want it named up-retry in default, labelled, retrying up, keeping the resumed misspelling", next.ObjectMeta)
	}
	if _, ok := next.Annotations[upgrade.AnnotationMisspeltPausedAt]; ok {
		t.Errorf("retry ops carries %s: it was never paused", upgrade.AnnotationMisspeltPausedAt)
	}
}

// plan names each field a patch removes with null (client-side kubectl apply would
// drop them), but not the spec.containers: null an empty PodSpec serialises to.
func TestPatchNulls(t *testing.T) {
	got := patchNulls([]byte(`{"spec":{"containers":null,"nodeSelector":{"disktype":null,"zone":"a"},"volumes":[{"name":"x","emptyDir":null}]}}`))
	if want := []string{"spec.nodeSelector.disktype", "spec.volumes[0].emptyDir"}; !slices.Equal(got, want) {
		t.Errorf("patchNulls = %v, want %v", got, want)
	}
	if got := patchNulls([]byte(`{"spec":{"containers":[{"name":"a","image":"b"}]}}`)); len(got) != 0 {
		t.Errorf("patchNulls of a patch without nulls = %v", got)
	}
}

// An ops that cannot work says why, and its exit gives the condition's next
// step (a new ops), not a retry that would fail the same way; an ops that
// selected nothing says which rules left the sandboxes out.
func TestStatusSaysWhyAnOpsStopped(t *testing.T) {
	a := &app{}
	for _, tc := range []struct {
		name, phase string
		conds       []metav1.Condition
		want        string // in the rendered conditions
		exit        string // in the exit's message ("" → exit 0)
	}{
		{"invalid selector", "Failed", []metav1.Condition{{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: "InvalidSpec",
			Message: "spec.selector: invalid value; delete this SandboxUpdateOps and create one with a valid selector"}},
			"create one with a valid selector", "Failed (InvalidSpec): spec.selector: invalid value"},
		{"invalid patch", "Failed", []metav1.Condition{
			{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: "InvalidPatch", Message: "the patch cannot work; no sandbox was touched"},
			{Type: "InvalidPatch", Status: metav1.ConditionTrue, Reason: "PatchRefused", Message: "spec.containers[0].image: Invalid value: \"My-Registry/App:V2\""}},
			"My-Registry/App:V2", "Failed (InvalidPatch): spec.containers[0].image"},
		{"nothing selected", "Completed", []metav1.Condition{{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: "NothingSelected",
			Message: "nothing was upgraded: no sandbox was selected: of the 2 sandboxes in namespace default, 2 do not match spec.selector (app=sandbx)"}},
			"2 do not match spec.selector", "Completed without upgrading any sandbox (NothingSelected): nothing was upgraded"},
		{"applied again", "Completed", []metav1.Condition{{Type: agentsv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: "NothingToUpdate",
			Message: "no sandbox needs this patch: of the 2 sandboxes in namespace default, 2 already have the patched template"}}, "2 already have the patched template", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "default", UID: "u1", CreationTimestamp: metav1.NewTime(t0)}}
			ops.Status.Phase, ops.Status.Conditions = agentsv1alpha1.SandboxUpdateOpsPhase(tc.phase), tc.conds
			s := summarize(ops, nil, t0.Add(time.Minute), 5)
			var shown []string
			for _, c := range s.Conditions {
				shown = append(shown, c.Message)
			}
			if !strings.Contains(strings.Join(shown, "\n"), tc.want) {
				t.Errorf("conditions shown %q, want one with %q", shown, tc.want)
			}
			err := a.statusExit(s, statusOptions{})
			switch {
			case tc.exit == "" && err != nil:
				t.Errorf("exit %v, want 0", err)
			case tc.exit != "" && (err == nil || !strings.Contains(err.Error(), tc.exit) || strings.Contains(err.Error(), "kubectl molt retry")):
				t.Errorf("exit %v, want %q and no retry", err, tc.exit)
			case tc.exit != "":
				want := ExitFailed
				if tc.phase == "Completed" {
					want = ExitNothingSelected
				}
				if e, ok := err.(*exitError); !ok || e.code != want {
					t.Errorf("exit %#v, want code %d", err, want)
				}
			}
		})
	}
}
