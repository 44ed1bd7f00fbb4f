package hookrunner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
)

// errReset is what agentruntime.Exec returns when the runtime reset the connection.
var errReset = fmt.Errorf("connection to the agent-runtime at http://127.0.0.1:49983 was reset: %w", agentruntime.ErrConnectionLost)

// A reset connection is called again, with the same tag (so the runtime hands back the run
// that may have started), at most maxResets times; other errors are not retried.
func TestRunRetriesAResetConnectionWithTheSameTag(t *testing.T) {
	hook := &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/backup"}}}
	sb := &agentsv1alpha1.Sandbox{}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "p1"}, Status: corev1.PodStatus{PodIP: "127.0.0.1"}}
	const tag = "molt/attempt-1/PreUpgrade"
	ok := agentruntime.Result{Exited: true}
	for _, tc := range []struct {
		name      string
		errs      []error // the calls' errors in order; past the end, the call succeeds
		killErr   error   // what killing the run given up on answers
		wantCalls int
		wantKill  bool
		wantErr   error
		wantSays  string
	}{
		{name: "one reset, then the run's end", errs: []error{errReset}, wantCalls: 2},
		{name: "resets up to the bound", errs: []error{errReset, errReset, errReset}, wantCalls: maxResets + 1},
		// Given up on, the run is killed: it must not go on beside the resume.
		{name: "one reset too many", errs: []error{errReset, errReset, errReset, errReset}, wantCalls: maxResets + 1, wantKill: true,
			wantErr: agentruntime.ErrConnectionLost, wantSays: "the hook's run was killed"},
		{name: "one reset too many, and the kill fails", errs: []error{errReset, errReset, errReset, errReset}, killErr: errReset, wantCalls: maxResets + 1, wantKill: true,
			wantErr: agentruntime.ErrConnectionLost, wantSays: "may still be running"},
		{name: "a timeout is not retried", errs: []error{agentruntime.ErrTimeout}, wantCalls: 1, wantErr: agentruntime.ErrTimeout},
		{name: "unauthenticated is not retried", errs: []error{agentruntime.ErrUnauthenticated}, wantCalls: 1, wantErr: agentruntime.ErrUnauthenticated},
		{name: "a reset, then a moment unreachable: still followed", errs: []error{errReset, agentruntime.ErrUnreachable}, wantCalls: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tags []string
			killed := false
			// reachWait far beyond run's 500ms pause between calls, which a loaded
			// machine can stretch: the unreachable case is followed because it comes
			// within the wait, whatever the scheduler does; no case waits it out.
			h := &HookRunner{kube: fake.NewClientset(pod), reachWait: 5 * time.Second, exec: func(_ context.Context, req agentruntime.ExecRequest) (agentruntime.Result, error) {
				tags = append(tags, req.Tag)
				if i := len(tags) - 1; i < len(tc.errs) {
					return agentruntime.Result{}, tc.errs[i]
				}
				return ok, nil
			}, killRun: func(_ context.Context, req agentruntime.ExecRequest) error {
				killed = req.Tag == tag
				return tc.killErr
			}}
			res, err := h.run(context.Background(), sb, pod, hook, tag, time.Time{})
			if killed != tc.wantKill {
				t.Errorf("killed %t, want %t", killed, tc.wantKill)
			}
			if len(tags) != tc.wantCalls {
				t.Errorf("calls = %d, want %d", len(tags), tc.wantCalls)
			}
			for i, got := range tags {
				if got != tag {
					t.Errorf("call %d tag = %q, want %q", i, got, tag)
				}
			}
			switch {
			case tc.wantErr == nil && (err != nil || !res.Succeeded()):
				t.Errorf("run = %+v, %v; want the run's success", res, err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("run error = %v, want %v", err, tc.wantErr)
			case tc.wantSays != "" && !strings.Contains(err.Error(), tc.wantSays):
				t.Errorf("run error = %v, want it to say %q", err, tc.wantSays)
			}
		})
	}
}

// timeoutSeconds bounds the hook's run, not each call: the calls that follow
// a run after a reset carry the deadline the first call's run started with,
// so three resets cannot stretch a 60-second hook to four minutes.
func TestRunKeepsTheHooksDeadlineAcrossResets(t *testing.T) {
	hook := &agentsv1alpha1.UpgradeAction{TimeoutSeconds: 60, Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/backup"}}}
	var deadlines []time.Time
	before := time.Now()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "p1"}}
	h := &HookRunner{kube: fake.NewClientset(pod), reachWait: time.Second, exec: func(_ context.Context, req agentruntime.ExecRequest) (agentruntime.Result, error) {
		if req.Timeout != time.Minute {
			t.Errorf("call %d: Timeout %s, want the hook's 1m0s", len(deadlines), req.Timeout)
		}
		deadlines = append(deadlines, req.Deadline)
		if len(deadlines) <= 2 {
			return agentruntime.Result{}, errReset
		}
		return agentruntime.Result{Exited: true}, nil
	}}
	if _, err := h.run(context.Background(), &agentsv1alpha1.Sandbox{}, pod, hook, "molt/a/PreUpgrade", time.Time{}); err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(deadlines) != 3 {
		t.Fatalf("calls = %d, want 3", len(deadlines))
	}
	if !deadlines[0].IsZero() {
		t.Errorf("first call: Deadline %s, want none (Timeout alone)", deadlines[0])
	}
	for i, d := range deadlines[1:] {
		if d.IsZero() || d != deadlines[1] || d.Before(before.Add(time.Minute)) || d.After(time.Now().Add(time.Minute)) {
			t.Errorf("call %d after a reset: Deadline %s, want the first call's start + 1m, the same for every call", i+1, d)
		}
	}
}

// A reset that came with the pod's deletion is not followed to another pod that got
// its IP: the hook is reported cut short by the deletion, not refused for its token.
func TestRunStopsFollowingAHookWhosePodWasDeleted(t *testing.T) {
	hook := &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/backup"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "p1"}}
	calls := 0
	h := &HookRunner{kube: fake.NewClientset(), reachWait: time.Second, exec: func(context.Context, agentruntime.ExecRequest) (agentruntime.Result, error) {
		calls++
		if calls == 1 {
			return agentruntime.Result{}, errReset
		}
		return agentruntime.Result{}, agentruntime.ErrUnauthenticated
	}}
	_, err := h.run(context.Background(), &agentsv1alpha1.Sandbox{}, pod, hook, "molt/a/PreUpgrade", time.Time{})
	if err == nil || !strings.Contains(err.Error(), "was deleted while the hook ran") || calls != 1 {
		t.Fatalf("run = %v after %d calls; want the deletion named after the first", err, calls)
	}
	if !errors.As(err, new(podGoneError)) {
		t.Errorf("run = %v, not a podGoneError: a preUpgrade cut short would not say what is left", err)
	}
}

// A preUpgrade cut short by its pod's deletion says nothing was backed up,
// that the next pod is backed up where the last backup is, and the way on:
// an ops for an ops's attempt, another template edit for a direct one.
func TestBackupCutShortSaysTheWayOn(t *testing.T) {
	for _, tc := range []struct {
		d    events.Data
		want string
	}{
		{events.Data{Ops: events.OpsRef{Name: "up"}, Sandbox: events.SandboxRef{Namespace: "team"}}, "once SandboxUpdateOps up has ended, `kubectl molt retry up -n team`"},
		{events.Data{}, "change spec.template again"},
	} {
		got := backupCutShort(tc.d, false)
		for _, want := range []string{"molt has no word of a backup by this run", "check that backup is intact", "copy a backup that must be kept away first", "The sandbox gets a new pod", tc.want} {
			if !strings.Contains(got, want) {
				t.Errorf("backupCutShort(ops %q) = %q, lacks %q", tc.d.Ops.Name, got, want)
			}
		}
	}
	// A paused sandbox woken for the upgrade is stopped again, not given a
	// pod at once (a walk read "gets a new pod" and found none).
	got := backupCutShort(events.Data{Ops: events.OpsRef{Name: "up"}, Sandbox: events.SandboxRef{Namespace: "team"}}, true)
	if !strings.Contains(got, "The sandbox is paused, so it is left with no pod") || strings.Contains(got, "The sandbox gets a new pod") {
		t.Errorf("backupCutShort of a paused sandbox = %q; want it to say it is left with no pod", got)
	}
}

// An agent-runtime still unreachable when the wait ends is said with where its
// address came from (a runtime-url annotation someone wrote, or the pod's IP)
// and what to check, the cause kept for errors.Is.
func TestUnreachableSaysWhereTheAddressCameFrom(t *testing.T) {
	hook := &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/backup"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "p1"}, Status: corev1.PodStatus{PodIP: "10.0.0.7"}}
	withURL := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{agentsv1alpha1.AnnotationRuntimeURL: "http://127.0.0.1:1"}}}
	for _, tc := range []struct {
		name string
		sb   *agentsv1alpha1.Sandbox
		want string
	}{
		{"runtime-url", withURL, "the address is from the sandbox's annotation " + agentsv1alpha1.AnnotationRuntimeURL},
		{"pod IP", &agentsv1alpha1.Sandbox{}, "the address is from the pod's IP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &HookRunner{kube: fake.NewClientset(pod), reachWait: time.Millisecond, exec: func(context.Context, agentruntime.ExecRequest) (agentruntime.Result, error) {
				return agentruntime.Result{}, fmt.Errorf("agent-runtime at x is not reachable: refused: %w", agentruntime.ErrUnreachable)
			}}
			_, err := h.run(context.Background(), tc.sb, pod, hook, "molt/a/PreUpgrade", time.Time{})
			if !errors.Is(err, agentruntime.ErrUnreachable) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "check that the sandbox's agent-runtime runs") {
				t.Errorf("run error = %v, want ErrUnreachable saying %q and what to check", err, tc.want)
			}
		})
	}
}

// A preUpgrade that failed while its pod went away (the runtime reports the
// hook killed, or stops answering, as the pod stops) gets the note too; one
// whose pod is still there, or a postUpgrade, does not.
func TestCutShortNoteWhenThePodWentAway(t *testing.T) {
	there := func(pod *corev1.Pod) *HookRunner { return &HookRunner{kube: fake.NewClientset(pod)} }
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "p1"}}
	d := events.Data{Ops: events.OpsRef{Name: "up"}, Sandbox: events.SandboxRef{Namespace: "ns", Name: "box"}}
	gone := &HookRunner{kube: fake.NewClientset()}
	if got := gone.withCutShortNote(context.Background(), preStep, pod, d, false, nil, "hook exited with code 143"); !strings.Contains(got, "was deleted while the hook ran") || !strings.Contains(got, "molt has no word of a backup by this run") {
		t.Errorf("preUpgrade whose pod went: %q, want the deletion and the note", got)
	}
	if got := gone.withCutShortNote(context.Background(), postStep, pod, d, false, nil, "hook exited with code 143"); !strings.Contains(got, "was deleted while the hook ran") ||
		!strings.Contains(got, "Check that the backup is still whole") || !strings.Contains(got, "`kubectl molt retry up -n ns`") {
		t.Errorf("postUpgrade whose pod went: %q, want the deletion, the backup to check and the retry", got)
	}
	direct := events.Data{Sandbox: d.Sandbox}
	if got := gone.withCutShortNote(context.Background(), postStep, pod, direct, false, nil, "hook exited with code 143"); !strings.Contains(got, "change spec.template again") {
		t.Errorf("direct postUpgrade whose pod went: %q, want the way on of a direct upgrade", got)
	}
	if got := there(pod).withCutShortNote(context.Background(), postStep, pod, d, false, nil, "hook exited with code 1"); got != "hook exited with code 1" {
		t.Errorf("postUpgrade whose pod is there: %q, want the message alone", got)
	}
	if got := there(pod).withCutShortNote(context.Background(), preStep, pod, d, false, nil, "hook exited with code 1"); got != "hook exited with code 1" {
		t.Errorf("preUpgrade whose pod is there: %q, want the message alone", got)
	}
}
