package statusagg

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// deletedNotes remembers, per ops key, the sandboxes deleted during their upgrade that the
// ops's status does not name yet. It only bridges the moment between the delete and the
// next status write, which carries them in the SandboxesDeleted condition for good.
//
// The notes belong to one ops, by UID: an ops deleted and applied again under the same
// name (the retry the user guide shows) is another ops, and must not inherit the notes
// of the first (they would name its sandboxes and count them as updated). Notes of
// another UID than the one asked for are dropped, and syncOps forgets a key whose ops is
// gone.
type deletedNotes struct {
	mu sync.Mutex
	m  map[string]opsNotes
}

// opsNotes are the notes of the ops of one UID.
type opsNotes struct {
	uid   types.UID
	notes []string
}

// add records a note for the ops of key and uid, replacing any notes of an earlier ops
// of the same name.
func (d *deletedNotes) add(key string, uid types.UID, note string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]opsNotes{}
	}
	cur := d.m[key]
	if cur.uid != uid {
		cur = opsNotes{uid: uid}
	}
	if !slices.Contains(cur.notes, note) {
		cur.notes = append(cur.notes, note)
	}
	d.m[key] = cur
}

// peek returns the notes of the ops of key and uid; notes of an earlier ops of the same
// name are forgotten.
func (d *deletedNotes) peek(key string, uid types.UID) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, ok := d.m[key]
	if !ok {
		return nil
	}
	if cur.uid != uid {
		delete(d.m, key)
		return nil
	}
	return slices.Clone(cur.notes)
}

// drop forgets the notes a status write of the ops of key and uid has recorded.
func (d *deletedNotes) drop(key string, uid types.UID, written []string) {
	if len(written) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, ok := d.m[key]
	if !ok || cur.uid != uid {
		return
	}
	cur.notes = slices.DeleteFunc(cur.notes, func(n string) bool { return slices.Contains(written, n) })
	if len(cur.notes) == 0 {
		delete(d.m, key)
		return
	}
	d.m[key] = cur
}

// forget drops every note of key: its ops is gone.
func (d *deletedNotes) forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, key)
}

// deletedHandler reports a sandbox deleted while an active ops was upgrading it: a Warning
// Event on the ops now, and the SandboxesDeleted condition at its next status write, so it
// does not silently drop out of the counters. An ops that is finished or being deleted is
// left alone: its counters are frozen and syncOps writes no more of its status, so a note
// would never be written (and an ops applied again under its name would inherit it).
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
		if err != nil || upgrade.IsFinished(ops) || ops.DeletionTimestamp != nil {
			return
		}
		stage, recorded := upgrade.ReasonFor(sb, string(ops.UID))
		key := ops.Namespace + "/" + ops.Name
		switch {
		case recorded && stage == agentsv1alpha1.UpgradingReasonSucceeded:
			// Updated, then deleted: it stays counted as updated, for good
			// (updatedDeparted), so a later success still moves the count.
			s.deleted.add(key, ops.UID, deletedNote(sb.Name, stage))
			s.opsCtl.EnqueueKey(key)
			return
		case recorded && upgrade.Terminal(stage):
			return
		case !recorded:
			stage = "admitted"
		}
		s.recorder.Eventf(ops, corev1.EventTypeWarning, EventSandboxDeletedDuringUpgrade,
			"sandbox %s was deleted during its upgrade (at %s); it is no longer counted", sb.Name, stage)
		s.deleted.add(key, ops.UID, deletedNote(sb.Name, stage))
		s.opsCtl.EnqueueKey(key)
	}}
}

// deletedNote is how the SandboxesDeleted condition names a sandbox deleted at stage.
func deletedNote(name, stage string) string { return fmt.Sprintf("%s (%s)", name, stage) }

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
