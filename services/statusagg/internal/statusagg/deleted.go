package statusagg

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// deletedNotes remembers, per ops key, the sandboxes deleted during their upgrade that the
// ops's status does not name yet. It only bridges the moment between the delete and the
// next status write, which carries them in the SandboxesDeleted condition for good.
type deletedNotes struct {
	mu sync.Mutex
	m  map[string][]string
}

func (d *deletedNotes) add(key, note string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string][]string{}
	}
	if !slices.Contains(d.m[key], note) {
		d.m[key] = append(d.m[key], note)
	}
}

func (d *deletedNotes) peek(key string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.m[key])
}

// drop forgets the notes a status write has recorded.
func (d *deletedNotes) drop(key string, written []string) {
	if len(written) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.m[key]; !ok {
		return
	}
	d.m[key] = slices.DeleteFunc(d.m[key], func(n string) bool { return slices.Contains(written, n) })
	if len(d.m[key]) == 0 {
		delete(d.m, key)
	}
}

// deletedHandler reports a sandbox deleted while an active ops was upgrading it: a Warning
// Event on the ops now, and the SandboxesDeleted condition at its next status write, so it
// does not silently drop out of the counters.
func (s *server) deletedHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		sb, ok := obj.(*agentsv1alpha1.Sandbox)
		if !ok || sb.Labels[agentsv1alpha1.LabelUpdateOps] == "" {
			return
		}
		ops, err := s.ops.SandboxUpdateOps(sb.Namespace).Get(sb.Labels[agentsv1alpha1.LabelUpdateOps])
		if err != nil || upgrade.IsFinished(ops) {
			return
		}
		stage, recorded := upgrade.ReasonFor(sb, string(ops.UID))
		key := ops.Namespace + "/" + ops.Name
		switch {
		case recorded && stage == agentsv1alpha1.UpgradingReasonSucceeded:
			// Updated, then deleted: it stays counted as updated, for good
			// (updatedDeparted), so a later success still moves the count.
			s.deleted.add(key, fmt.Sprintf("%s (%s)", sb.Name, stage))
			s.opsCtl.EnqueueKey(key)
			return
		case recorded && upgrade.Terminal(stage):
			return
		case !recorded:
			stage = "admitted"
		}
		note := fmt.Sprintf("%s (%s)", sb.Name, stage)
		s.recorder.Eventf(ops, corev1.EventTypeWarning, EventSandboxDeletedDuringUpgrade,
			"sandbox %s was deleted during its upgrade (at %s); it is no longer counted", sb.Name, stage)
		s.deleted.add(key, note)
		s.opsCtl.EnqueueKey(key)
	}}
}

// withDeletedNotes adds notes to st's SandboxesDeleted condition (kept across writes).
func withDeletedNotes(st *agentsv1alpha1.SandboxUpdateOpsStatus, notes []string, gen int64) {
	if len(notes) == 0 {
		return
	}
	var all []string
	if c := meta.FindStatusCondition(st.Conditions, ConditionSandboxesDeleted); c != nil {
		all = strings.Split(strings.TrimPrefix(c.Message, deletedPrefix), ", ")
	}
	for _, n := range notes {
		if !slices.Contains(all, n) {
			all = append(all, n)
		}
	}
	setCondition(&st.Conditions, metav1.Condition{Type: ConditionSandboxesDeleted, Status: metav1.ConditionTrue,
		Reason: DeletedReasonDuringUpgrade, Message: deletedPrefix + strings.Join(all, ", "), ObservedGeneration: gen})
}

const deletedPrefix = "deleted during their upgrade: "

// updatedDeparted counts the sandboxes st's SandboxesDeleted condition names as deleted
// after their upgrade succeeded: they stay counted as updated.
func updatedDeparted(st agentsv1alpha1.SandboxUpdateOpsStatus) int {
	c := meta.FindStatusCondition(st.Conditions, ConditionSandboxesDeleted)
	if c == nil {
		return 0
	}
	n := 0
	for _, note := range strings.Split(strings.TrimPrefix(c.Message, deletedPrefix), ", ") {
		if strings.HasSuffix(note, " ("+agentsv1alpha1.UpgradingReasonSucceeded+")") {
			n++
		}
	}
	return n
}
