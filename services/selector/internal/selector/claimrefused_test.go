package selector

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A sandbox whose claim the API server refuses for good (an admission policy on
// sandboxes) is recorded on the ops with the server's words and not tried again; the
// others are admitted as usual. Before, the refusal was retried for ever and held the
// ops in Updating with nothing on its status.
func TestRefusedClaimIsRecordedNotRetried(t *testing.T) {
	f := newFixture(t)
	for i := range 3 {
		f.sandbox(fmt.Sprintf("sbx-%d", i), oldImage, agentsv1alpha1.SandboxRunning, nil)
	}
	const words = "sbx-1 is frozen by the platform team"
	testenv.Get(t).Refuse(t, f.ns, testenv.Refusal{
		Group: agentsv1alpha1.SchemeGroupVersion.Group, Resource: "sandboxes",
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Allow:      `object.metadata.name != 'sbx-1' || !has(object.metadata.labels) || !('` + agentsv1alpha1.LabelUpdateOps + `' in object.metadata.labels)`,
		Message:    words,
	}, func(ctx context.Context) error {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"probe"}}}`, agentsv1alpha1.LabelUpdateOps)
		_, err := f.agents.AgentsV1alpha1().Sandboxes(f.ns).Patch(ctx, "sbx-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	f.startSelector()
	f.ops("upgrade", 3, newImage, nil)

	f.waitClaimed("upgrade", "sbx-0", "sbx-2")
	var refused map[string]string
	testenv.Eventually(t, 30*time.Second, "the refusal recorded on the ops", func() (bool, error) {
		ops, err := f.agents.AgentsV1alpha1().SandboxUpdateOps(f.ns).Get(context.Background(), "upgrade", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		refused = upgrade.ClaimRefused(ops)
		return len(refused) == 1 && strings.Contains(refused["sbx-1"], words), fmt.Errorf("annotation %q", ops.Annotations[upgrade.AnnotationClaimRefused])
	})
	testenv.Consistently(t, quiet, "sbx-1 left alone", func() (bool, error) {
		got, err := f.claimed("upgrade")
		return err == nil && slices.Equal(got, []string{"sbx-0", "sbx-2"}), fmt.Errorf("claimed %v, err %v", got, err)
	})
}
