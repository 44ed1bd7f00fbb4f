package selector

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// TestTemplateCheckInAFullQuota asks the real API server's quota admission
// about a set's new template while its namespace's ResourceQuota is full:
// a template the size of the members' is accepted when the quota is full to
// the pod (deleting a member makes room for its replacement), and one asking
// for more CPU than the quota holds is refused even though the members'
// template is refused by the quota too. The quota's status is written here
// as its controller would (the test cluster runs none).
func TestTemplateCheckInAFullQuota(t *testing.T) {
	env := testenv.Get(t)
	ctx, ns := context.Background(), env.Namespace(t)
	asking := func(image, cpu string) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}
	}
	// Four members of 1 cpu each: 4 pods of 4, 4 cpu of 16 used.
	env.SetQuota(t, ns, "compute",
		corev1.ResourceList{corev1.ResourcePods: resource.MustParse("4"), corev1.ResourceRequestsCPU: resource.MustParse("16")},
		corev1.ResourceList{corev1.ResourcePods: resource.MustParse("4"), corev1.ResourceRequestsCPU: resource.MustParse("4")})

	members := asking(oldImage, "1")
	tests := []struct {
		name     string
		template *corev1.PodTemplateSpec
		refused  bool
	}{
		{name: "the members' size, the quota full to the pod", template: asking(newImage, "1")},
		{name: "64 cpu under a 16-cpu quota", template: asking(newImage, "64"), refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "warm", UID: "uid-1"}}
			set.Spec.Template = tt.template
			c := newCheckPool()
			c.dryRun = func(ctx context.Context, pod *corev1.Pod) (string, error) {
				c.dryRuns++
				return upgrade.DryRunCreatePod(ctx, env.Kube, pod)
			}
			// Without members on another template the quota refuses it:
			// else this test shows nothing.
			if refused, err := c.templateRefused(ctx, set, "r2", nil, time.Now()); err != nil || !upgrade.QuotaExceeded(refused) {
				t.Fatalf("with no outdated member: refused %q, err %v; want exceeded quota", refused, err)
			}
			c.checks = map[string]templateCheck{}
			refused, err := c.templateRefused(ctx, set, "r2", members, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if got := refused != ""; got != tt.refused {
				t.Fatalf("refused %q; want refused %v", refused, tt.refused)
			}
			if tt.refused && (!upgrade.QuotaExceeded(refused) || !strings.Contains(refused, "requests.cpu=64")) {
				t.Errorf("refused %q, want the quota's words for the 64 cpu asked", refused)
			}
		})
	}
}
