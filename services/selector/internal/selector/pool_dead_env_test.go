package selector

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// TestPoolKeepsMembersThatKeepDying: on a real API server, a set whose
// members die (their phase set Failed, as statusagg does when the pod's
// container exits under restartPolicy Never) has deadReplaced of them
// deleted and replaced; the next one is kept, not replaced, and recorded
// on the set. Deleting it resumes the pool: the record goes, a member is
// created.
func TestPoolKeepsMembersThatKeepDying(t *testing.T) {
	f := newFixture(t)
	f.startSelector()
	ctx := context.Background()
	sandboxes := f.agents.AgentsV1alpha1().Sandboxes(f.ns)
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: f.ns}}
	set.Spec.Replicas = 1
	set.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "sandbox", Image: oldImage}}}}
	set, err := f.agents.AgentsV1alpha1().SandboxSets(f.ns).Create(ctx, set, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	revision, err := upgrade.Revision(set.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	// oneMemberOtherThan waits for exactly one member, not named gone.
	oneMemberOtherThan := func(gone string) string {
		t.Helper()
		var names []string
		testenv.Eventually(t, 30*time.Second, "one member other than "+gone, func() (bool, error) {
			var err error
			if names, err = f.liveMembers("warm"); err != nil {
				return false, err
			}
			return len(names) == 1 && names[0] != gone, fmt.Errorf("members %v", names)
		})
		return names[0]
	}
	die := func(name string) {
		t.Helper()
		sb, err := sandboxes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sb.Status.Phase = agentsv1alpha1.SandboxFailed
		sb.Status.Conditions = []metav1.Condition{{Type: agentsv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "PodNotReady",
			Message: fmt.Sprintf("pod %s has failed; container sandbox exited with code 1 (Error)", name), LastTransitionTime: metav1.Now()}}
		if _, err := sandboxes.UpdateStatus(ctx, sb, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	name := ""
	for range deadReplaced {
		name = oneMemberOtherThan(name)
		die(name)
	}
	kept := oneMemberOtherThan(name)
	die(kept)
	testenv.Eventually(t, 30*time.Second, "the set records the dead member kept", func() (bool, error) {
		got, err := f.agents.AgentsV1alpha1().SandboxSets(f.ns).Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		why := upgrade.MembersFailing(got, revision)
		return strings.Contains(why, kept+": pod "+kept+" has failed"), fmt.Errorf("annotations %v", got.Annotations)
	})
	testenv.Consistently(t, 3*time.Second, "the dead member is kept, not replaced", func() (bool, error) {
		names, err := f.liveMembers("warm")
		if err != nil {
			return false, err
		}
		return len(names) == 1 && names[0] == kept, fmt.Errorf("members %v, want [%s]", names, kept)
	})

	if err := sandboxes.Delete(ctx, kept, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	oneMemberOtherThan(kept)
	testenv.Eventually(t, 30*time.Second, "the record removed", func() (bool, error) {
		got, err := f.agents.AgentsV1alpha1().SandboxSets(f.ns).Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v, ok := got.Annotations[upgrade.AnnotationMembersFailing]
		return !ok, fmt.Errorf("record %q", v)
	})
}
