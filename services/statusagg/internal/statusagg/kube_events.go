package statusagg

import (
	"context"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
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
	// EventOpsCompleted: every sandbox the ops counts is updated, or the
	// selected ones already had the patched template.
	EventOpsCompleted = "OpsCompleted"
	// EventOpsNothingSelected (Warning): the ops completed without selecting
	// any sandbox (Progressing reason NothingSelected); the message says
	// which rules left the namespace's sandboxes out.
	EventOpsNothingSelected = agentsv1alpha1.ProgressingReasonNothingSelected
	// EventOpsFailed (Warning): failures used up the budget; the message names them.
	EventOpsFailed = "OpsFailed"
	// EventOpsInvalid (Warning): the ops' selector or maxUnavailable cannot be used.
	EventOpsInvalid = "OpsInvalid"

	// EventUpgradeStarted: a sandbox began an upgrade attempt.
	EventUpgradeStarted = "UpgradeStarted"
	// EventUpgradeSucceeded: a sandbox's attempt reached Succeeded.
	EventUpgradeSucceeded = "UpgradeSucceeded"
	// EventTemplateEditedDuringUpgrade (Warning, on the sandbox): an ops's
	// attempt succeeded, and spec.template was changed after it built the
	// new pod: the pod does not run the template, and nothing rolls the
	// edit out (no spec.upgradePolicy).
	EventTemplateEditedDuringUpgrade = "TemplateEditedDuringUpgrade"
	// A sandbox's attempt that ends in a failure is announced by a Warning
	// Event whose reason is the failed reason itself (PreUpgradeFailed,
	// UpgradePodFailed, ...), as upstream's is; the message is the failure's.

	// EventOpsInvalidPatch (Warning): the ops's patch cannot work; the ops
	// failed before touching any sandbox.
	EventOpsInvalidPatch = "InvalidPatch"
	// EventSandboxDeletedDuringUpgrade (Warning, on the ops): a sandbox the
	// ops was upgrading was deleted mid-attempt.
	EventSandboxDeletedDuringUpgrade = "SandboxDeletedDuringUpgrade"
	// EventPreUpgradeNote (Warning, on the sandbox): preUpgrade went on with
	// a note: it exited 0 but wrote to stderr (a backup that may have failed
	// part way), or it was not run as the sandbox had no pod.
	EventPreUpgradeNote = "PreUpgradeNote"
	// EventNewPodDeleted (Warning, on the sandbox): the new pod an attempt
	// built was deleted while the status shows it in UpgradePod; podcycler
	// builds it again, and nothing else would tell of it.
	EventNewPodDeleted = "NewPodDeleted"
	// EventStageStalled (Warning, on the sandbox): the watchdog found a stage
	// without progress past its deadline and re-drove it.
	EventStageStalled = "StageStalled"
	// EventPodCreateFailed (Warning, on the sandbox): the API server refuses
	// the sandbox's pod (Ready=False PodCreateFailed); the message has its
	// words.
	EventPodCreateFailed = agentsv1alpha1.ReadyReasonPodCreateFailed
	// EventPodDeleteRefused (Warning, on the sandbox): the sandbox is paused
	// and the API server refuses to delete its pod (SandboxPaused=False
	// PodDeleteRefused); the message has its words.
	EventPodDeleteRefused = PausedReasonPodDeleteRefused
)

// eventWriters is how many Event writers statusagg runs.
//
// client-go's broadcaster writes its Events one at a time, and once a
// thousand wait behind the writer it drops the next ones without a word. An
// ops upgrading 1000 sandboxes makes about 35 Events a second (each attempt's
// start and end); one writer on a busy API server wrote about 15, lost a
// fifth of them and showed the rest a minute late. Each writer is its own
// broadcaster, and an object's Events always go to the same one, so
// client-go's per-object aggregation and spam filter work as with one.
const eventWriters = 8

// eventCacheEntries is how many objects' recent Events client-go's
// correlator remembers (for aggregation and its spam filter) over all the
// writers: client-go's default for its one broadcaster. Each writer sees
// only its share of the objects, so it keeps its share of the entries, and
// 8 writers hold no more than one did.
const eventCacheEntries = 4096

// newRecorder starts writers Event broadcasters writing to sink; stop
// flushes and ends them.
func newRecorder(ctx context.Context, sink record.EventSink, writers int) (rec record.EventRecorder, stop func()) {
	r := shardedRecorder{}
	var broadcasters []record.EventBroadcaster
	writers = max(writers, 1)
	cache := record.CorrelatorOptions{LRUCacheSize: max(eventCacheEntries/writers, 1)}
	for range writers {
		b := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(cache))
		b.StartRecordingToSink(sink)
		broadcasters = append(broadcasters, b)
		r = append(r, b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component}))
	}
	return r, func() {
		for _, b := range broadcasters {
			b.Shutdown()
		}
	}
}

// apiServerEvents is the sink of statusagg's Events: the core/v1 Events API.
func apiServerEvents(kube kubernetes.Interface) record.EventSink {
	return &typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")}
}

// shardedRecorder hands each object's Events to one recorder of several,
// chosen by the object's namespace and name.
type shardedRecorder []record.EventRecorder

func (r shardedRecorder) of(object runtime.Object) record.EventRecorder {
	m, err := meta.Accessor(object)
	if err != nil {
		return r[0] // the recorder itself reports what it cannot refer to
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(m.GetNamespace() + "/" + m.GetName()))
	return r[h.Sum32()%uint32(len(r))]
}

func (r shardedRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.of(object).Event(object, eventtype, reason, message)
}

func (r shardedRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.of(object).Eventf(object, eventtype, reason, messageFmt, args...)
}

func (r shardedRecorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.of(object).AnnotatedEventf(object, annotations, eventtype, reason, messageFmt, args...)
}

// opsPhaseEvent is the Event type and reason announcing an ops' new phase;
// none ("") for Pending before the first sandbox starts.
func opsPhaseEvent(st agentsv1alpha1.SandboxUpdateOpsStatus) (eventType, reason string) {
	switch st.Phase {
	case agentsv1alpha1.SandboxUpdateOpsUpdating:
		return corev1.EventTypeNormal, EventOpsUpdating
	case agentsv1alpha1.SandboxUpdateOpsCompleted:
		if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionProgressing); c != nil && c.Reason == agentsv1alpha1.ProgressingReasonNothingSelected {
			return corev1.EventTypeWarning, EventOpsNothingSelected
		}
		return corev1.EventTypeNormal, EventOpsCompleted
	case agentsv1alpha1.SandboxUpdateOpsFailed:
		if meta.IsStatusConditionTrue(st.Conditions, agentsv1alpha1.ConditionInvalidPatch) {
			return corev1.EventTypeWarning, EventOpsInvalidPatch
		}
		if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionProgressing); c != nil && c.Reason == agentsv1alpha1.ProgressingReasonInvalidSpec {
			return corev1.EventTypeWarning, EventOpsInvalid
		}
		return corev1.EventTypeWarning, EventOpsFailed
	}
	for _, c := range st.Conditions {
		if c.Type == agentsv1alpha1.ConditionProgressing && c.Reason == agentsv1alpha1.ProgressingReasonInvalidSpec {
			return corev1.EventTypeWarning, EventOpsInvalid
		}
	}
	if meta.IsStatusConditionTrue(st.Conditions, agentsv1alpha1.ConditionWaitingForNamespace) {
		return corev1.EventTypeNormal, EventOpsWaiting
	}
	return "", "" // Pending before its first sandbox: OpsUpdating says when it starts
}
