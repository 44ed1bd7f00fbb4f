package patcher

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
)

// A patch that adds a container with no image to this sandbox (meant for a
// container it names otherwise) fails PreUpgrade before anything is
// patched or backed up. Before, preUpgrade ran, and UpgradePod's dry run
// refused the pod.
func TestPatchAddingAContainerWithNoImageFailsBeforeTheBackup(t *testing.T) {
	startPatcher(t)
	ns := testenv.Get(t).Namespace(t)
	ops, sb := claimed(t, ns, "sbx-bare", func(o *agentsv1alpha1.SandboxUpdateOps) {
		o.Spec.Patch = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"main","env":[{"name":"MODE","value":"fast"}]}]}}`)}
	})
	out := subscribe(t, ns)
	request(t, ops, sb)
	select {
	case ev := <-out:
		if ev.Type != events.TypeFailed || ev.Data.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed {
			t.Fatalf("%s %s %q, want PreUpgradeFailed", ev.Type, ev.Data.Reason, ev.Data.Message)
		}
		for _, want := range []string{"adds containers/main to sandbox " + ns + "/sbx-bare with no image", "it has containers/sandbox", "preUpgrade did not run"} {
			if !strings.Contains(ev.Data.Message, want) {
				t.Errorf("message %q lacks %q", ev.Data.Message, want)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20s of requested")
	}
	templateUnchanged(t, sb)
}
