package molt

import (
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// stageAdmitted counts sandboxes the ops has labelled whose status does not
// show the attempt yet (the patcher has not reported).
const stageAdmitted = "Admitted"

// mainStages are always shown, even at 0; other stages (Resuming,
// Checkpointing, ...) when a sandbox is in them.
var mainStages = []string{agentsv1alpha1.UpgradingReasonPreUpgrade, agentsv1alpha1.UpgradingReasonUpgradePod, agentsv1alpha1.UpgradingReasonPostUpgrade}

// Summary is what status shows of one ops at one moment; -o json prints it.
type Summary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	Paused    bool   `json:"paused"`
	// Deleting: the ops is being deleted and waits for the sandboxes in a
	// stage to end their attempt; nothing more is started.
	Deleting bool `json:"deleting"`
	// Stale says that no statusagg runs, so this status is not being
	// updated (from its Lease; empty when it runs or cannot be told).
	Stale      string `json:"stale,omitempty"`
	Total      int    `json:"total"`
	Updated    int    `json:"updated"`
	Updating   int    `json:"updating"`
	Failed     int    `json:"failed"`
	NotStarted int    `json:"notStarted"`
	// Released counts, while the ops is being deleted, the sandboxes that
	// have ended their attempt since and left it (the selector removed its
	// label): its status is no longer written.
	Released int `json:"released,omitempty"`
	// Stages counts the sandboxes in flight per stage, in the stage table's
	// order.
	Stages []StageCount `json:"stages"`
	// ElapsedSeconds runs from the ops's creation to now, or to its end.
	ElapsedSeconds float64 `json:"elapsedSeconds"`
	// PerMinute is sandboxes updated per minute over ElapsedSeconds.
	PerMinute float64 `json:"perMinute"`
	// ETASeconds estimates the time left at PerMinute (absent when unknown).
	ETASeconds *float64 `json:"etaSeconds,omitempty"`
	// InFlight are the slowest sandboxes in flight, the longest in its
	// stage first.
	InFlight []InFlight `json:"inFlight"`
	// FailedSandboxes are every failed sandbox, by name.
	FailedSandboxes []FailedSandbox `json:"failedSandboxes"`
	// ImageNotPulled, when a failed sandbox's new pod cannot pull an image
	// the patch sets, says what to do instead of a retry (which keeps the
	// patch).
	ImageNotPulled string `json:"imageNotPulled,omitempty"`
	// Conditions are the ops's True conditions' messages, and a
	// Progressing=False's that says why it stopped (stoppedBy) (why it waits, why
	// it failed).
	Conditions []Condition `json:"conditions,omitempty"`

	// liveUpdated and liveFailed count the claimed sandboxes as read, which
	// the status's counters (written at most every --ops-status-interval)
	// may not include yet.
	liveUpdated, liveFailed int
}

// StageCount is how many sandboxes are in one stage.
type StageCount struct {
	Stage string `json:"stage"`
	Count int    `json:"count"`
}

// InFlight is one sandbox being upgraded and how long it has been in its
// stage.
type InFlight struct {
	Name       string  `json:"name"`
	Stage      string  `json:"stage"`
	AgeSeconds float64 `json:"ageSeconds"`
	// WaitingFor says what the new pod of one in UpgradePod (or the pod
	// waking a paused one, in Resuming) waits for (not scheduled, a container
	// waiting), read from the pod (withPodWaits).
	WaitingFor string `json:"waitingFor,omitempty"`
}

// podWaitAfter is how long a sandbox is in UpgradePod before status reads
// its pod to say what the pod waits for: most pods are Ready sooner.
const podWaitAfter = 10 * time.Second

// withPodWaits fills WaitingFor of the sandboxes shown in flight that have
// been in UpgradePod or Resuming for podWaitAfter or more, from their pod as getPod
// reads it: the reason only shows on the sandbox at the stage's deadline. A
// pod that cannot be read is left out.
func withPodWaits(ctx context.Context, s *Summary, getPod func(ctx context.Context, name string) (*corev1.Pod, error)) {
	for i := range s.InFlight {
		f := &s.InFlight[i]
		if (f.Stage != agentsv1alpha1.UpgradingReasonUpgradePod && f.Stage != agentsv1alpha1.UpgradingReasonResuming) || f.AgeSeconds < podWaitAfter.Seconds() {
			continue
		}
		if pod, err := getPod(ctx, f.Name); err == nil && pod.DeletionTimestamp == nil && !upgrade.PodReady(pod) {
			f.WaitingFor = upgrade.WaitingFor(pod)
		}
	}
}

// FailedSandbox is one sandbox whose attempt failed.
type FailedSandbox struct {
	Name    string `json:"name"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Stderr is the hook's stderr tail when a hook failed.
	Stderr string `json:"stderr,omitempty"`
}

// Condition is one ops condition.
type Condition struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Finished reports whether the ops has ended.
func (s Summary) Finished() bool {
	return s.Phase == string(agentsv1alpha1.SandboxUpdateOpsCompleted) || s.Phase == string(agentsv1alpha1.SandboxUpdateOpsFailed)
}

// summarize builds the Summary of ops from the sandboxes it has claimed
// (label update-ops = its name) at now. Counters are the ops's status
// (statusagg recounts them), brought up to the sandboxes as read while the
// ops runs; the stage of each sandbox is its Upgrading condition for this
// attempt.
func summarize(ops *agentsv1alpha1.SandboxUpdateOps, claimed []agentsv1alpha1.Sandbox, now time.Time, slowest int) Summary {
	st := ops.Status
	s := Summary{
		Namespace: ops.Namespace, Name: ops.Name, Phase: string(st.Phase), Paused: ops.Spec.Paused, Deleting: ops.DeletionTimestamp != nil,
		Total: int(st.Replicas), Updated: int(st.UpdatedReplicas), Updating: int(st.UpdatingReplicas), Failed: int(st.FailedReplicas),
		InFlight: []InFlight{}, FailedSandboxes: []FailedSandbox{},
	}
	if s.Phase == "" {
		s.Phase = string(agentsv1alpha1.SandboxUpdateOpsPending)
	}
	s.NotStarted = max(0, s.Total-s.Updated-s.Updating-s.Failed)
	notStartedAtDelete := s.NotStarted
	counts := map[string]int{}
	for i := range claimed {
		sb := &claimed[i]
		switch upgrade.StateFor(sb, ops.Name, ops.UID) {
		case upgrade.Updating:
			stage, ok := upgrade.ReasonFor(sb, string(ops.UID))
			if !ok || !upgrade.InProgress(stage) {
				stage = stageAdmitted
			}
			counts[stage]++
			f := InFlight{Name: sb.Name, Stage: stage}
			if a := meta.FindStatusCondition(sb.Status.Conditions, upgrade.ConditionAttempt); ok && a != nil {
				f.AgeSeconds = now.Sub(a.LastTransitionTime.Time).Round(time.Second).Seconds()
			}
			s.InFlight = append(s.InFlight, f)
		case upgrade.Updated:
			s.liveUpdated++
		case upgrade.Failed:
			s.liveFailed++
			f := FailedSandbox{Name: sb.Name}
			if c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading); c != nil {
				f.Reason, f.Message = c.Reason, c.Message
				f.Stderr, _, _ = agentruntime.HookOutput(c.Message)
			}
			s.FailedSandboxes = append(s.FailedSandboxes, f)
		}
	}
	var pullFailures []string
	for _, f := range s.FailedSandboxes {
		if f.Reason == agentsv1alpha1.UpgradingReasonUpgradePodFailed {
			pullFailures = append(pullFailures, f.Message)
		}
	}
	s.ImageNotPulled = upgrade.ImageNotPulledHint(ops.Spec.Patch.Raw, pullFailures)
	if !s.Finished() {
		// The status's counters are written at most every
		// --ops-status-interval, the sandboxes' stages as they move: the
		// counters shown agree with the stages. Updated and failed keep the
		// status's count when it is higher: it still counts sandboxes that
		// left the ops (deleted after their upgrade).
		live := 0
		for _, n := range counts {
			live += n
		}
		s.Updating, s.Updated, s.Failed = live, max(s.Updated, s.liveUpdated), max(s.Failed, s.liveFailed)
		s.Total = max(s.Total, s.Updated+s.Updating+s.Failed)
		s.NotStarted = max(0, s.Total-s.Updated-s.Updating-s.Failed)
		if s.Deleting {
			// Its status stopped at the delete: a sandbox that ended its
			// attempt since and was released is in no live count, and
			// nothing more is started.
			s.Released = max(0, s.NotStarted-notStartedAtDelete)
			s.NotStarted = min(s.NotStarted, notStartedAtDelete)
		}
	}
	for _, stage := range append([]string{stageAdmitted}, upgrade.Stages()...) {
		if counts[stage] > 0 || slices.Contains(mainStages, stage) {
			s.Stages = append(s.Stages, StageCount{Stage: stage, Count: counts[stage]})
		}
	}
	slices.SortStableFunc(s.InFlight, func(a, b InFlight) int {
		if a.AgeSeconds != b.AgeSeconds {
			if a.AgeSeconds > b.AgeSeconds {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(s.InFlight) > slowest {
		s.InFlight = s.InFlight[:slowest]
	}
	slices.SortFunc(s.FailedSandboxes, func(a, b FailedSandbox) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range st.Conditions {
		if c.Message != "" && (c.Status == metav1.ConditionTrue || stoppedBy(c)) {
			s.Conditions = append(s.Conditions, Condition{Type: c.Type, Reason: c.Reason, Message: c.Message})
		}
	}

	end := now
	if s.Finished() {
		// The ops ended when its last condition changed.
		var last time.Time
		for _, c := range st.Conditions {
			if c.LastTransitionTime.After(last) {
				last = c.LastTransitionTime.Time
			}
		}
		if !last.IsZero() && last.Before(now) {
			end = last
		}
	}
	elapsed := end.Sub(ops.CreationTimestamp.Time)
	if elapsed < 0 {
		elapsed = 0
	}
	s.ElapsedSeconds = elapsed.Round(time.Second).Seconds()
	if elapsed > 0 && s.Updated > 0 {
		s.PerMinute = float64(s.Updated) / elapsed.Minutes()
		// Paused or being deleted, it admits nothing: no time left can be estimated.
		if left := s.Total - s.Updated - s.Failed; !s.Finished() && !s.Paused && !s.Deleting && left > 0 {
			eta := float64(left) / s.PerMinute * 60
			s.ETASeconds = &eta
		}
	}
	return s
}

// stoppedBy reports whether c is a Progressing=False that says why the ops
// does not go on (a selector or maxUnavailable it cannot use, a patch that
// cannot work, a selector that matches nothing to update): the status
// shows its message too, not only the True conditions'.
func stoppedBy(c metav1.Condition) bool {
	return c.Type == agentsv1alpha1.ConditionProgressing && c.Status == metav1.ConditionFalse &&
		c.Reason != agentsv1alpha1.ProgressingReasonCompleted && c.Reason != agentsv1alpha1.ProgressingReasonFailureBudgetExhausted
}
