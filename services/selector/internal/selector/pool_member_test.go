package selector

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A SandboxSet's new template whose pods the API server accepts but whose
// member Sandboxes it refuses (here an admission policy on Sandboxes; a CEL
// rule or a webhook answers the same way) replaces no idle member: the
// roll would delete each outdated member and fail to create its
// replacement, leaving the pool short. The refusal is recorded on the set
// in the API server's words. Before, the pod's dry run alone was asked.
func TestPoolReplacesNoMemberWhoseReplacementIsRefused(t *testing.T) {
	f := newFixture(t)
	env := testenv.Get(t)
	f.startSelector()
	ctx := context.Background()
	sandboxes := f.agents.AgentsV1alpha1().Sandboxes(f.ns)
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: f.ns}}
	set.Spec.Replicas = 2
	set.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: oldImage}}}}
	if _, err := f.agents.AgentsV1alpha1().SandboxSets(f.ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var before []string
	testenv.Eventually(t, 30*time.Second, "two members", func() (bool, error) {
		var err error
		before, err = f.liveMembers("warm")
		return err == nil && len(before) == 2, fmt.Errorf("members %v, err %v", before, err)
	})
	for _, name := range before {
		sb, err := sandboxes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sb.Status.Phase = agentsv1alpha1.SandboxRunning
		if _, err := sandboxes.UpdateStatus(ctx, sb, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	const words = "sandboxes of this image are not allowed here"
	env.Refuse(t, f.ns, testenv.Refusal{
		Group: agentsv1alpha1.SchemeGroupVersion.Group, Resource: "sandboxes",
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Allow:      fmt.Sprintf("!has(object.spec.template) || object.spec.template.spec.containers.all(c, c.image != '%s')", newImage),
		Message:    words,
	}, func(ctx context.Context) error {
		probe := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: f.ns}}
		probe.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: newImage}}}}
		_, err := sandboxes.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	edit := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":"` + newImage + `"}]}}}}`)
	if _, err := f.agents.AgentsV1alpha1().SandboxSets(f.ns).Patch(ctx, "warm", types.MergePatchType, edit, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the refusal recorded on the set", func() (bool, error) {
		got, err := f.agents.AgentsV1alpha1().SandboxSets(f.ns).Get(ctx, "warm", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		check := got.Annotations[upgrade.AnnotationTemplateCheck]
		return strings.Contains(check, words) && strings.Contains(check, "member Sandbox"), fmt.Errorf("template check %q", check)
	})
	testenv.Consistently(t, quiet, "both idle members kept", func() (bool, error) {
		now, err := f.liveMembers("warm")
		return err == nil && slices.Equal(now, before), fmt.Errorf("members %v, were %v (err %v)", now, before, err)
	})
}

// liveMembers lists the sorted names of set's members not being deleted.
func (f *fixture) liveMembers(set string) ([]string, error) {
	list, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelSandboxPool + "=" + set})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sb := range list.Items {
		if sb.DeletionTimestamp == nil {
			out = append(out, sb.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}
