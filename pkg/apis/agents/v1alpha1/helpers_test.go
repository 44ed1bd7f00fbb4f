package v1alpha1_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"molt.dev/pkg/apis/agents/v1alpha1"
)

func intOrString(v intstr.IntOrString) *intstr.IntOrString { return &v }

func TestSandboxUpdateOpsStrategyMaxUnavailableOf(t *testing.T) {
	tests := []struct {
		name    string
		value   *intstr.IntOrString
		total   int
		want    int
		wantErr bool
	}{
		{name: "unset means 1", value: nil, total: 10, want: 1},
		{name: "integer", value: intOrString(intstr.FromInt32(2)), total: 10, want: 2},
		{name: "integer above total", value: intOrString(intstr.FromInt32(20)), total: 10, want: 20},
		{name: "zero means 1", value: intOrString(intstr.FromInt32(0)), total: 10, want: 1},
		{name: "percent rounds up", value: intOrString(intstr.FromString("10%")), total: 11, want: 2},
		{name: "percent exact", value: intOrString(intstr.FromString("50%")), total: 10, want: 5},
		{name: "zero percent means 1", value: intOrString(intstr.FromString("0%")), total: 10, want: 1},
		{name: "percent of nothing means 1", value: intOrString(intstr.FromString("10%")), total: 0, want: 1},
		{name: "not a percent", value: intOrString(intstr.FromString("two")), total: 10, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := v1alpha1.SandboxUpdateOpsStrategy{MaxUnavailable: tt.value}
			got, err := s.MaxUnavailableOf(tt.total)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Fatalf("got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestSandboxSetUpdateStrategyMaxUnavailableOf(t *testing.T) {
	tests := []struct {
		name     string
		value    *intstr.IntOrString
		replicas int
		want     int
	}{
		{name: "unset is 20% rounded up", value: nil, replicas: 6, want: 2},
		{name: "unset of 10 is 2", value: nil, replicas: 10, want: 2},
		{name: "unset of 0 is 1", value: nil, replicas: 0, want: 1},
		{name: "integer", value: intOrString(intstr.FromInt32(3)), replicas: 10, want: 3},
		{name: "percent", value: intOrString(intstr.FromString("50%")), replicas: 5, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := v1alpha1.SandboxSetUpdateStrategy{MaxUnavailable: tt.value}
			got, err := s.MaxUnavailableOf(tt.replicas)
			if err != nil || got != tt.want {
				t.Fatalf("got %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestSandboxSetScaleStrategyMaxUnavailableOf(t *testing.T) {
	tests := []struct {
		name        string
		value       *intstr.IntOrString
		replicas    int
		want        int
		wantLimited bool
		wantErr     bool
	}{
		{name: "unset is not limited", value: nil, replicas: 1000, want: 0, wantLimited: false},
		{name: "integer", value: intOrString(intstr.FromInt32(50)), replicas: 1000, want: 50, wantLimited: true},
		{name: "integer above replicas", value: intOrString(intstr.FromInt32(20)), replicas: 10, want: 20, wantLimited: true},
		{name: "zero means 1", value: intOrString(intstr.FromInt32(0)), replicas: 10, want: 1, wantLimited: true},
		{name: "percent rounds up", value: intOrString(intstr.FromString("10%")), replicas: 11, want: 2, wantLimited: true},
		{name: "percent exact", value: intOrString(intstr.FromString("5%")), replicas: 1000, want: 50, wantLimited: true},
		{name: "zero percent means 1", value: intOrString(intstr.FromString("0%")), replicas: 10, want: 1, wantLimited: true},
		{name: "percent of nothing means 1", value: intOrString(intstr.FromString("10%")), replicas: 0, want: 1, wantLimited: true},
		{name: "not a percent", value: intOrString(intstr.FromString("two")), replicas: 10, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := v1alpha1.SandboxSetScaleStrategy{MaxUnavailable: tt.value}
			got, limited, err := s.MaxUnavailableOf(tt.replicas)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				if limited {
					t.Fatalf("limited = true with an error")
				}
				return
			}
			if got != tt.want || limited != tt.wantLimited {
				t.Fatalf("got %d, limited %v; want %d, limited %v", got, limited, tt.want, tt.wantLimited)
			}
		})
	}
}

func TestUpgradeActionTimeout(t *testing.T) {
	tests := []struct {
		name   string
		action *v1alpha1.UpgradeAction
		want   time.Duration
	}{
		{name: "nil action", action: nil, want: 60 * time.Second},
		{name: "unset", action: &v1alpha1.UpgradeAction{}, want: 60 * time.Second},
		{name: "negative", action: &v1alpha1.UpgradeAction{TimeoutSeconds: -1}, want: 60 * time.Second},
		{name: "set", action: &v1alpha1.UpgradeAction{TimeoutSeconds: 600}, want: 10 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.action.Timeout(); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEffectiveTypeAndPhases(t *testing.T) {
	if got := (v1alpha1.SandboxUpdateOpsStrategy{}).EffectiveType(); got != v1alpha1.UpgradeTypeRecreate {
		t.Errorf("EffectiveType() of unset = %q, want Recreate", got)
	}
	cr := v1alpha1.SandboxUpdateOpsStrategy{Type: v1alpha1.UpgradeTypeCheckpointRestore}
	if got := cr.EffectiveType(); got != v1alpha1.UpgradeTypeCheckpointRestore {
		t.Errorf("EffectiveType() = %q, want CheckpointRestore", got)
	}

	tests := []struct {
		name   string
		filter *v1alpha1.UpgradeStateFilter
		want   []v1alpha1.SandboxPhase
	}{
		{name: "nil filter", filter: nil, want: []v1alpha1.SandboxPhase{v1alpha1.SandboxRunning}},
		{name: "empty states", filter: &v1alpha1.UpgradeStateFilter{}, want: []v1alpha1.SandboxPhase{v1alpha1.SandboxRunning}},
		{name: "paused only", filter: &v1alpha1.UpgradeStateFilter{States: []v1alpha1.SandboxPhase{v1alpha1.SandboxPaused}},
			want: []v1alpha1.SandboxPhase{v1alpha1.SandboxPaused}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.filter.EligiblePhases()
			if strings.Join(phases(got), ",") != strings.Join(phases(tt.want), ",") {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func phases(ps []v1alpha1.SandboxPhase) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

func TestUpgradingReasons(t *testing.T) {
	tests := []struct {
		reason     string
		wantStatus metav1.ConditionStatus
		wantFailed bool
	}{
		{reason: v1alpha1.UpgradingReasonResuming, wantStatus: metav1.ConditionFalse},
		{reason: v1alpha1.UpgradingReasonResumeSucceed, wantStatus: metav1.ConditionFalse},
		{reason: v1alpha1.UpgradingReasonPreUpgrade, wantStatus: metav1.ConditionFalse},
		{reason: v1alpha1.UpgradingReasonPreUpgradeFailed, wantStatus: metav1.ConditionFalse, wantFailed: true},
		{reason: v1alpha1.UpgradingReasonCheckpointing, wantStatus: metav1.ConditionFalse},
		{reason: v1alpha1.UpgradingReasonCheckpointFailed, wantStatus: metav1.ConditionFalse, wantFailed: true},
		{reason: v1alpha1.UpgradingReasonUpgradePod, wantStatus: metav1.ConditionFalse},
		{reason: v1alpha1.UpgradingReasonUpgradePodFailed, wantStatus: metav1.ConditionFalse, wantFailed: true},
		{reason: v1alpha1.UpgradingReasonPostUpgrade, wantStatus: metav1.ConditionFalse},
		{reason: v1alpha1.UpgradingReasonPostUpgradeFailed, wantStatus: metav1.ConditionFalse, wantFailed: true},
		{reason: v1alpha1.UpgradingReasonSucceeded, wantStatus: metav1.ConditionTrue},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			if got := v1alpha1.UpgradingConditionStatus(tt.reason); got != tt.wantStatus {
				t.Errorf("UpgradingConditionStatus = %s, want %s", got, tt.wantStatus)
			}
			if got := v1alpha1.IsUpgradingFailedReason(tt.reason); got != tt.wantFailed {
				t.Errorf("IsUpgradingFailedReason = %v, want %v", got, tt.wantFailed)
			}
		})
	}
}

func TestTruncateConditionMessage(t *testing.T) {
	tests := []struct {
		name    string
		msg     string
		wantLen int
	}{
		{name: "short", msg: "hook failed", wantLen: len("hook failed")},
		{name: "exactly the cap", msg: strings.Repeat("a", 1024), wantLen: 1024},
		{name: "ascii over the cap", msg: strings.Repeat("a", 2000), wantLen: 1024},
		// "升" is 3 bytes: 341 of them fill 1023 bytes, the 342nd would end at 1026.
		{name: "multibyte not split", msg: strings.Repeat("升", 400), wantLen: 1023},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := v1alpha1.TruncateConditionMessage(tt.msg)
			if len(got) != tt.wantLen || !strings.HasPrefix(tt.msg, got) {
				t.Fatalf("len %d, want %d", len(got), tt.wantLen)
			}
		})
	}
}

// TestStatusCountersAlwaysSerialised: the ops counters are written even
// when 0, and so are the SandboxSet's.
func TestStatusCountersAlwaysSerialised(t *testing.T) {
	ops, err := json.Marshal(v1alpha1.SandboxUpdateOps{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"replicas":0`, `"updatedReplicas":0`, `"updatingReplicas":0`, `"failedReplicas":0`} {
		if !strings.Contains(string(ops), key) {
			t.Errorf("SandboxUpdateOps JSON %s lacks %s", ops, key)
		}
	}
	set, err := json.Marshal(v1alpha1.SandboxSet{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"replicas":0`, `"availableReplicas":0`, `"updatedReplicas":0`, `"updatedAvailableReplicas":0`} {
		if !strings.Contains(string(set), key) {
			t.Errorf("SandboxSet JSON %s lacks %s", set, key)
		}
	}
}

// TestPatchKeepsRawBytes: spec.patch round-trips through the Go type with
// its Strategic Merge Patch directives and explicit nulls intact.
func TestPatchKeepsRawBytes(t *testing.T) {
	var ops v1alpha1.SandboxUpdateOps
	err := yaml.Unmarshal([]byte(`
spec:
  patch:
    spec:
      initContainers: null
      volumes:
        - name: legacy-cache
          $patch: delete
`), &ops)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(ops.Spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"$patch":"delete"`, `"initContainers":null`} {
		if !strings.Contains(string(ops.Spec.Patch.Raw), want) || !strings.Contains(string(out), want) {
			t.Errorf("patch lost %s: raw %s, marshalled %s", want, ops.Spec.Patch.Raw, out)
		}
	}

	// An ops without a patch does not send one.
	empty, err := json.Marshal(v1alpha1.SandboxUpdateOpsSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(empty), "patch") || strings.Contains(string(empty), "updateStrategy") {
		t.Errorf("empty spec marshals to %s, want no patch and no updateStrategy", empty)
	}
}
