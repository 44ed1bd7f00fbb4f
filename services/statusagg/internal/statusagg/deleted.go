package statusagg

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
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
		if !upgrade.ClaimedBy(sb, ops.Name, string(ops.UID)) {
			// An earlier ops of that name claimed it (the selector leaves a
			// sandbox being deleted labelled), not the one there now.
			return
		}
		stage, recorded := upgrade.ReasonFor(sb, string(ops.UID))
		key := ops.Namespace + "/" + ops.Name
		switch {
		case recorded && stage == agentsv1alpha1.UpgradingReasonSucceeded:
			// Updated, then deleted: it stays counted as updated, for good
			// (updatedDeparted), so a later success still moves the count.
			// Its Event is Normal: nothing went wrong.
			s.recorder.Eventf(ops, corev1.EventTypeNormal, EventSandboxDeletedDuringUpgrade,
				"sandbox %s was deleted after its upgrade succeeded; it stays counted as updated", sb.Name)
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

// The SandboxesDeleted condition's message keeps its counts apart from its list of
// notes, so that a list cut to the condition's length never loses a count:
//
//	3 deleted during the upgrade, 2 of them after it succeeded (still counted as updated): a (Succeeded), b (PreUpgrade), c (Succeeded)
//
// The list keeps the newest notes that fit, oldest first; "…" in its place says older
// ones were left out (the Warning Event of each names it too). statusagg reads the counts
// back from the message at every write (it keeps nothing in memory across restarts), so
// the format below is parsed as well as printed: change both together.
const (
	deletedCounts = "%d deleted during the upgrade, %d of them after it succeeded (still counted as updated): "
	deletedElided = "…"
	deletedSep    = ", "
	// deletedLegacyPrefix began the message before it carried counts; such a message
	// (written by an older statusagg) is read by counting its notes.
	deletedLegacyPrefix = "deleted during their upgrade: "
)

var deletedCountsRE = regexp.MustCompile(`^(\d+) deleted during the upgrade, (\d+) of them after it succeeded \(still counted as updated\): `)

// deletedRecord is what a SandboxesDeleted condition says: how many sandboxes were
// deleted during the ops, how many of them after their upgrade succeeded, and the
// newest notes, oldest first.
type deletedRecord struct {
	total, updated int
	notes          []string
}

// readDeleted reads st's SandboxesDeleted condition (the zero record without one).
func readDeleted(st agentsv1alpha1.SandboxUpdateOpsStatus) deletedRecord {
	c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionSandboxesDeleted)
	if c == nil {
		return deletedRecord{}
	}
	var r deletedRecord
	switch m := deletedCountsRE.FindStringSubmatch(c.Message); {
	case m != nil:
		r.total, _ = strconv.Atoi(m[1])
		r.updated, _ = strconv.Atoi(m[2])
		r.notes = strings.Split(c.Message[len(m[0]):], deletedSep)
		r.notes = slices.DeleteFunc(r.notes, func(n string) bool { return n == deletedElided || n == "" })
	case strings.HasPrefix(c.Message, deletedLegacyPrefix):
		r.notes = strings.Split(strings.TrimPrefix(c.Message, deletedLegacyPrefix), deletedSep)
		// A legacy message cut to the condition's length ends in part of a note.
		if last := r.notes[len(r.notes)-1]; !strings.HasSuffix(last, ")") {
			r.notes = r.notes[:len(r.notes)-1]
		}
		r.total = len(r.notes)
		for _, n := range r.notes {
			if isUpdatedNote(n) {
				r.updated++
			}
		}
	}
	return r
}

// isUpdatedNote is true for the note of a sandbox deleted after its upgrade succeeded.
func isUpdatedNote(note string) bool {
	return strings.HasSuffix(note, " ("+agentsv1alpha1.UpgradingReasonSucceeded+")")
}

// message renders r within a condition message's length: the counts, then as many of
// the newest notes as fit, after "…" when some are left out (fewer notes than the total:
// cut now, or in an earlier message).
func (r deletedRecord) message() string {
	head := fmt.Sprintf(deletedCounts, r.total, r.updated)
	for notes := r.notes; len(notes) > 0; notes = notes[1:] {
		list := strings.Join(notes, deletedSep)
		if len(notes) < r.total {
			list = deletedElided + deletedSep + list
		}
		if len(head)+len(list) <= agentsv1alpha1.MaxConditionMessageLength {
			return head + list
		}
	}
	return head + deletedElided
}

// withDeletedNotes adds notes to st's SandboxesDeleted condition (kept across writes).
//
// A note is counted when it is added to the list, and only when the list does not
// already hold it, so a note applied twice (a status write that reached the API server
// but returned an error, two statusagg processes during a leader hand-over) is counted
// once. That guarantee lasts only as long as the note is among those the message keeps,
// the newest that fit in the condition's 1024 bytes: some 20 notes of 30-character
// names, as few as 3 of the longest a sandbox may have. Both repeats come within about
// one status write of the first, so a note is counted twice only if more notes than
// that were added in between; perfect de-duplication would need every note stored, which
// a condition message cannot hold. The limit is the other way too: two sandboxes of the
// same name deleted at the same stage in one ops (deleted, created again, claimed again)
// are counted once while the first is still listed. A delete statusagg never saw (it was
// not running) is not counted here at all; desiredOpsStatus keeps updated from going
// down for those.
func withDeletedNotes(st *agentsv1alpha1.SandboxUpdateOpsStatus, notes []string, gen int64) {
	if len(notes) == 0 {
		return
	}
	r := readDeleted(*st)
	for _, n := range notes {
		if slices.Contains(r.notes, n) {
			continue
		}
		r.notes = append(r.notes, n)
		r.total++
		if isUpdatedNote(n) {
			r.updated++
		}
	}
	setCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionSandboxesDeleted, Status: metav1.ConditionTrue,
		Reason: agentsv1alpha1.DeletedReasonDuringUpgrade, Message: r.message(), ObservedGeneration: gen})
}

// updatedDeparted counts the sandboxes st's SandboxesDeleted condition records as
// deleted after their upgrade succeeded: they stay counted as updated.
func updatedDeparted(st agentsv1alpha1.SandboxUpdateOpsStatus) int {
	return readDeleted(st).updated
}
