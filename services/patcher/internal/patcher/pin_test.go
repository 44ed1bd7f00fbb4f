package patcher

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/generated/clientset/versioned/fake"
	"molt.dev/pkg/upgrade"
)

// A direct attempt that the sandbox's policy makes a CheckpointRestore is
// pinned to it at its start: removing the policy mid-attempt must not make
// it a Recreate that deletes the old pod without a checkpoint.
func TestDirectCheckpointRestoreIsPinnedAtItsStart(t *testing.T) {
	const direct = upgrade.DirectAttemptPrefix + "rev-4"
	policy := func(typ agentsv1alpha1.UpgradeType) *agentsv1alpha1.SandboxUpgradePolicy {
		return &agentsv1alpha1.SandboxUpgradePolicy{Type: typ}
	}
	for _, tc := range []struct {
		name      string
		policy    *agentsv1alpha1.SandboxUpgradePolicy
		mark      string
		attempt   string
		wantPatch bool
	}{
		{"direct CheckpointRestore", policy(agentsv1alpha1.UpgradeTypeCheckpointRestore), "", direct, true},
		{"direct CheckpointRestore, already pinned", policy(agentsv1alpha1.UpgradeTypeCheckpointRestore), upgrade.StrategyValue(direct), direct, false},
		{"direct Recreate", policy(agentsv1alpha1.UpgradeTypeRecreate), "", direct, false},
		{"an ops's attempt (the spec write carries its mark)", policy(agentsv1alpha1.UpgradeTypeCheckpointRestore), "", "ops-uid", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sbx", Namespace: "ns", Annotations: map[string]string{}}}
			sb.Spec.UpgradePolicy = tc.policy
			if tc.mark != "" {
				sb.Annotations[upgrade.AnnotationUpgradeStrategy] = tc.mark
			}
			client := fake.NewSimpleClientset()
			var patched []byte
			client.PrependReactor("patch", "sandboxes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				patched = a.(k8stesting.PatchAction).GetPatch()
				return true, sb.DeepCopy(), nil
			})
			p := &Patcher{agents: client}
			if _, err := p.pinDirectCheckpointRestore(context.Background(), sb, tc.attempt); err != nil {
				t.Fatal(err)
			}
			if (patched != nil) != tc.wantPatch {
				t.Fatalf("patched %s, want a patch: %v", patched, tc.wantPatch)
			}
			if tc.wantPatch {
				pinned := sb.DeepCopy()
				pinned.Annotations[upgrade.AnnotationUpgradeStrategy] = upgrade.StrategyValue(tc.attempt)
				pinned.Spec.UpgradePolicy = nil // the user removes the policy mid-attempt
				if !upgrade.ChecksPoint(pinned, tc.attempt) {
					t.Error("with the mark written, the attempt stays a CheckpointRestore when the policy goes")
				}
			}
		})
	}
}

// A direct attempt's hooks are fixed at its start, from spec.lifecycle as it
// is then, and not again on a redelivery after spec.lifecycle was edited: its
// preUpgrade and postUpgrade stay one pair.
func TestDirectHooksAreFixedAtTheStart(t *testing.T) {
	const direct = upgrade.DirectAttemptPrefix + "rev-4"
	begun := &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"backup"}}}}
	edited := &agentsv1alpha1.SandboxLifecycle{PreUpgrade: &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"other"}}}}
	for _, tc := range []struct {
		name      string
		pinned    string
		attempt   string
		wantPatch bool
	}{
		{"direct, not fixed yet", "", direct, true},
		{"direct, fixed by an earlier delivery, spec.lifecycle edited since", upgrade.AttemptHooksValue(direct, edited), direct, false},
		{"direct, fixed for an earlier attempt", upgrade.AttemptHooksValue(upgrade.DirectAttemptPrefix+"rev-3", begun), direct, true},
		{"an ops's attempt (the spec write fixes them)", "", "ops-uid", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sbx", Namespace: "ns", Annotations: map[string]string{}}}
			sb.Spec.Lifecycle = begun
			if tc.pinned != "" {
				sb.Annotations[upgrade.AnnotationAttemptHooks] = tc.pinned
			}
			client := fake.NewSimpleClientset()
			var patched []byte
			client.PrependReactor("patch", "sandboxes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				patched = a.(k8stesting.PatchAction).GetPatch()
				return true, sb.DeepCopy(), nil
			})
			p := &Patcher{agents: client}
			if _, err := p.pinDirectHooks(context.Background(), sb, tc.attempt); err != nil {
				t.Fatal(err)
			}
			if (patched != nil) != tc.wantPatch {
				t.Fatalf("patched %s, want a patch: %v", patched, tc.wantPatch)
			}
			if tc.wantPatch {
				value, _ := json.Marshal(upgrade.AttemptHooksValue(direct, begun))
				if !strings.Contains(string(patched), string(value)) || !strings.Contains(string(patched), `{"op":"test","path":"/metadata/uid"`) {
					t.Errorf("patch %s, want the hooks spec.lifecycle holds now fixed for %s, on the sandbox's uid", patched, direct)
				}
			}
		})
	}
}
