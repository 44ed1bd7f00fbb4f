package v1alpha1

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// This file holds the defaults of API fields that more than one service
// reads, so that every reader resolves an unset field the same way.

// DefaultHookTimeoutSeconds is a lifecycle hook's timeout when
// timeoutSeconds is unset. The CRD defaults the field to it as well.
const DefaultHookTimeoutSeconds = 60

// DefaultSandboxSetMaxUnavailable is a SandboxSet's
// updateStrategy.maxUnavailable when unset: a percentage of spec.replicas.
const DefaultSandboxSetMaxUnavailable = "20%"

// Timeout is how long the hook may run: timeoutSeconds, or
// DefaultHookTimeoutSeconds when it is unset or not positive.
func (a *UpgradeAction) Timeout() time.Duration {
	if a == nil || a.TimeoutSeconds <= 0 {
		return DefaultHookTimeoutSeconds * time.Second
	}
	return time.Duration(a.TimeoutSeconds) * time.Second
}

// EffectiveType is the strategy's type, Recreate when unset.
func (s SandboxUpdateOpsStrategy) EffectiveType() UpgradeType {
	if s.Type == "" {
		return UpgradeTypeRecreate
	}
	return s.Type
}

// MaxUnavailableOf resolves maxUnavailable against the number of selected
// sandboxes: unset means 1, a percentage is of total rounded up, and a
// result below 1 is raised to 1 so that an ops always makes progress.
func (s SandboxUpdateOpsStrategy) MaxUnavailableOf(total int) (int, error) {
	if s.MaxUnavailable == nil {
		return 1, nil
	}
	return scaledAtLeastOne(s.MaxUnavailable, total)
}

// MaxUnavailableOf resolves maxUnavailable against spec.replicas: unset
// means DefaultSandboxSetMaxUnavailable, a percentage is rounded up, and a
// result below 1 is raised to 1.
func (s SandboxSetUpdateStrategy) MaxUnavailableOf(replicas int) (int, error) {
	v := s.MaxUnavailable
	if v == nil {
		def := intstr.FromString(DefaultSandboxSetMaxUnavailable)
		v = &def
	}
	return scaledAtLeastOne(v, replicas)
}

// MaxUnavailableOf resolves maxUnavailable against spec.replicas: how many
// members may be created but not yet available at once. Unset means not
// limited (limited is false, n is 0); a percentage is of replicas rounded
// up, and a result below 1 is raised to 1 so that the pool always grows.
func (s SandboxSetScaleStrategy) MaxUnavailableOf(replicas int) (n int, limited bool, err error) {
	if s.MaxUnavailable == nil {
		return 0, false, nil
	}
	n, err = scaledAtLeastOne(s.MaxUnavailable, replicas)
	if err != nil {
		return 0, false, err
	}
	return n, true, nil
}

func scaledAtLeastOne(v *intstr.IntOrString, total int) (int, error) {
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, true)
	if err != nil {
		return 0, fmt.Errorf("resolve maxUnavailable %q: %w", v.String(), err)
	}
	return max(n, 1), nil
}

// EligiblePhases is the set of sandbox phases an ops picks up: the filter's
// states, or [Running] when the filter is unset or empty.
func (f *UpgradeStateFilter) EligiblePhases() []SandboxPhase {
	if f == nil || len(f.States) == 0 {
		return []SandboxPhase{SandboxRunning}
	}
	return f.States
}

// UpgradingConditionStatus is the status the Upgrading condition carries
// with reason: True for UpgradingReasonSucceeded, False for every other
// reason.
func UpgradingConditionStatus(reason string) metav1.ConditionStatus {
	if reason == UpgradingReasonSucceeded {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// IsUpgradingFailedReason reports whether reason is one of the Upgrading
// condition's failure reasons, which leave a sandbox in phase Upgrading
// until a later ops resumes it.
func IsUpgradingFailedReason(reason string) bool {
	return slices.Contains(UpgradingFailedReasons, reason)
}

// UpgradingFailedReasons are the Upgrading condition's failure reasons.
var UpgradingFailedReasons = []string{
	UpgradingReasonPreUpgradeFailed,
	UpgradingReasonCheckpointFailed,
	UpgradingReasonUpgradePodFailed,
	UpgradingReasonPostUpgradeFailed,
}

// TruncateConditionMessage cuts msg to at most MaxConditionMessageLength
// bytes without splitting a UTF-8 character.
func TruncateConditionMessage(msg string) string {
	return TruncateConditionMessageTo(msg, MaxConditionMessageLength)
}

// TruncateConditionMessageTo cuts msg to at most n bytes without splitting a
// UTF-8 character.
func TruncateConditionMessageTo(msg string, n int) string {
	if len(msg) <= n {
		return msg
	}
	cut := max(n, 0)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}
