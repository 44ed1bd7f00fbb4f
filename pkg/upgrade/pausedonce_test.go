package upgrade

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// The selector's pause-once guards belong to the ops that was paused: a copy
// created from it (another UID) carries the annotations but was not paused,
// and is paused again; a paused-at value with no UID (an older molt's, or an
// annotation copied on purpose) is taken as the ops's own.
func TestPausedOnceIsTheOpsOwn(t *testing.T) {
	ops := func(paused bool, annotations ...string) *agentsv1alpha1.SandboxUpdateOps {
		o := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{UID: "u-1", Generation: 2, Annotations: map[string]string{}}}
		o.Spec.Paused = paused
		for i := 0; i+1 < len(annotations); i += 2 {
			o.Annotations[annotations[i]] = annotations[i+1]
		}
		return o
	}
	const (
		nb = AnnotationNoBackup
		at = AnnotationNoBackupPausedAt
	)
	for _, tc := range []struct {
		name         string
		ops          *agentsv1alpha1.SandboxUpdateOps
		once, paused bool
	}{
		{"never paused", ops(false), false, false},
		{"paused by this write, still at it", ops(true, nb, "sb-1", at, "2 u-1"), true, true},
		{"paused, then resumed by the user", ops(false, nb, "sb-1", at, "2 u-1"), true, false},
		{"paused again by the user after a change", ops(true, nb, "sb-1", at, "1 u-1"), true, false},
		{"a copy of another ops paused for it", ops(true, nb, "sb-1", at, "2 u-0"), false, false},
		{"an older molt's value", ops(true, nb, "sb-1", at, "2"), true, true},
		{"the annotation alone, copied on purpose", ops(false, nb, "sb-1"), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PausedOnce(tc.ops, nb, at); got != tc.once {
				t.Errorf("PausedOnce = %v, want %v", got, tc.once)
			}
			if _, got := PausedForNoBackup(tc.ops); got != tc.paused {
				t.Errorf("PausedForNoBackup = %v, want %v", got, tc.paused)
			}
		})
	}
	o := ops(false)
	if got := PausedAtValue(o); got != "3 u-1" {
		t.Errorf("PausedAtValue = %q, want the generation the pause write makes and the UID", got)
	}
}
