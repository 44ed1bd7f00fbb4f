package statusagg

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/generated/clientset/versioned/scheme"
)

// Component is the source component of the Kubernetes Events statusagg records.
const Component = "molt-statusagg"

// Kubernetes Event reasons. Produced by statusagg, each only after the status
// write that makes the transition succeeded; read by users (kubectl get
// events, kubectl describe).
const (
	// EventOpsWaiting: the ops waits in Pending for the namespace's active ops.
	EventOpsWaiting = "OpsWaiting"
	// EventOpsUpdating: the ops started (or resumed) upgrading sandboxes.
	EventOpsUpdating = "OpsUpdating"
	// EventOpsCompleted: every sandbox the ops counts is updated, or none needed it.
	EventOpsCompleted = "OpsCompleted"
	// EventOpsFailed (Warning): failures used up the budget; the message names them.
	EventOpsFailed = "OpsFailed"
	// EventOpsInvalid (Warning): the ops' selector or maxUnavailable cannot be used.
	EventOpsInvalid = "OpsInvalid"

	// EventUpgradeStarted: a sandbox began an upgrade attempt.
	EventUpgradeStarted = "UpgradeStarted"
	// EventUpgradeSucceeded: a sandbox's attempt reached Succeeded.
	EventUpgradeSucceeded = "UpgradeSucceeded"
	// A sandbox's attempt that ends in a failure is announced by a Warning
	// Event whose reason is the failed reason itself (PreUpgradeFailed,
	// UpgradePodFailed, ...), as upstream's is; the message is the failure's.

	// EventOpsInvalidPatch (Warning): the ops's patch cannot work; the ops
	// failed before touching any sandbox.
	EventOpsInvalidPatch = "InvalidPatch"
	// EventSandboxDeletedDuringUpgrade (Warning, on the ops): a sandbox the
	// ops was upgrading was deleted mid-attempt.
	EventSandboxDeletedDuringUpgrade = "SandboxDeletedDuringUpgrade"
	// EventStageStalled (Warning, on the sandbox): the watchdog found a stage
	// without progress past its deadline and re-drove it.
	EventStageStalled = "StageStalled"
)

// newRecorder starts an Event broadcaster writing to the API server; stop
// flushes and ends it.
func newRecorder(ctx context.Context, kube kubernetes.Interface) (rec record.EventRecorder, stop func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component}), b.Shutdown
}

// opsPhaseEvent is the Event type and reason announcing an ops' new phase.
func opsPhaseEvent(st agentsv1alpha1.SandboxUpdateOpsStatus) (eventType, reason string) {
	switch st.Phase {
	case agentsv1alpha1.SandboxUpdateOpsUpdating:
		return corev1.EventTypeNormal, EventOpsUpdating
	case agentsv1alpha1.SandboxUpdateOpsCompleted:
		return corev1.EventTypeNormal, EventOpsCompleted
	case agentsv1alpha1.SandboxUpdateOpsFailed:
		if meta.IsStatusConditionTrue(st.Conditions, ConditionInvalidPatch) {
			return corev1.EventTypeWarning, EventOpsInvalidPatch
		}
		return corev1.EventTypeWarning, EventOpsFailed
	}
	for _, c := range st.Conditions {
		if c.Type == agentsv1alpha1.ConditionProgressing && c.Reason == ProgressingReasonInvalidSpec {
			return corev1.EventTypeWarning, EventOpsInvalid
		}
	}
	return corev1.EventTypeNormal, EventOpsWaiting
}
