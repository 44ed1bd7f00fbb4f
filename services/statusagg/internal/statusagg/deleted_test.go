package statusagg

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/controller"
	"molt.dev/pkg/generated/clientset/versioned/fake"
	agentslisters "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// An ops deleted and applied again under the same name (the user guide's retry) starts
// clean: sandboxes of the first one deleted during its upgrade are not named on the new
// one's SandboxesDeleted condition, nor counted in its TOTAL and UPDATED. The first ops
// is deleted in each way that left a note behind: while it waited on its finalizer
// (syncOps writes no status of an ops being deleted, so the note was never written),
// and at once, the new one appearing before statusagg saw the first gone.
func TestOpsAppliedAgainStartsWithoutTheDeletedNotesOfTheFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		// deleting: the first ops is being deleted when its sandbox is deleted.
		deleting bool
		// seenGone: statusagg syncs the first ops's key after it is gone,
		// before the new one exists.
		seenGone bool
	}{
		{name: "first ops being deleted", deleting: true},
		{name: "first ops gone before its note was written, not seen gone"},
		{name: "first ops gone before its note was written, seen gone", seenGone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newDeletedHarness(t)
			first := h.ops("first-uid")
			if tc.deleting {
				first.DeletionTimestamp = &metav1.Time{}
				first.Finalizers = []string{"agents.kruise.io/sandboxupdateops-protection"}
			}
			h.setOps(first)
			old := h.sandbox("s1", first.UID, agentsv1alpha1.UpgradingReasonSucceeded)
			h.deleteSandbox(old)
			if notes := h.s.deleted.peek("ns/up", first.UID); tc.deleting && notes != nil {
				t.Errorf("noted %v for an ops being deleted, whose status is not written any more", notes)
			}
			if tc.seenGone {
				h.removeOps(first)
				if err := h.s.syncOps(context.Background(), "ns/up"); err != nil {
					t.Fatal(err)
				}
				if notes := h.s.deleted.peek("ns/up", first.UID); notes != nil {
					t.Errorf("the sync that found the first ops gone kept its notes %v", notes)
				}
			}

			renewed := h.ops("second-uid")
			h.setOps(renewed)
			h.addSandbox(h.sandbox("s2", "", ""))
			for i := range 2 { // the second sync reads back what the first wrote
				if err := h.s.syncOps(context.Background(), "ns/up"); err != nil {
					t.Fatalf("sync %d: %v", i, err)
				}
				h.setOps(h.written("up"))
			}
			st := h.written("up").Status
			if c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionSandboxesDeleted); c != nil {
				t.Errorf("the new ops inherited the first's SandboxesDeleted: %q", c.Message)
			}
			if st.Replicas != 1 || st.UpdatedReplicas != 0 {
				t.Errorf("TOTAL %d, UPDATED %d; want 1 and 0 (s2 only)", st.Replicas, st.UpdatedReplicas)
			}
		})
	}
}

// A sandbox deleted while its ops is active is still noted and counted: the fix above
// leaves the ordinary case alone.
func TestSandboxDeletedDuringAnActiveOpsIsCounted(t *testing.T) {
	h := newDeletedHarness(t)
	ops := h.ops("ops-uid")
	ops.Status.Replicas, ops.Status.UpdatedReplicas = 2, 1
	h.setOps(ops)
	h.addSandbox(h.sandbox("s2", "", ""))
	h.deleteSandbox(h.sandbox("s1", ops.UID, agentsv1alpha1.UpgradingReasonSucceeded))
	for i := range 2 {
		if err := h.s.syncOps(context.Background(), "ns/up"); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
		h.setOps(h.written("up"))
	}
	st := h.written("up").Status
	c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionSandboxesDeleted)
	if c == nil || !strings.HasSuffix(c.Message, ": s1 (Succeeded)") {
		t.Fatalf("SandboxesDeleted = %+v, want it naming s1", c)
	}
	if st.Replicas != 2 || st.UpdatedReplicas != 1 {
		t.Errorf("TOTAL %d, UPDATED %d; want 2 and 1 (s1 stays counted as updated)", st.Replicas, st.UpdatedReplicas)
	}
	// Each deletion has its Event: a Normal one for a sandbox deleted after
	// it succeeded.
	select {
	case ev := <-h.s.recorder.(*record.FakeRecorder).Events:
		if !strings.HasPrefix(ev, "Normal "+EventSandboxDeletedDuringUpgrade) || !strings.Contains(ev, "sandbox s1 was deleted after its upgrade succeeded") {
			t.Errorf("Event %q, want a Normal %s naming s1", ev, EventSandboxDeletedDuringUpgrade)
		}
	default:
		t.Error("no Event for s1, deleted after it succeeded")
	}
}

// A sandbox deleted while still labelled by an earlier ops of the same name (the
// selector leaves a sandbox being deleted labelled, and the user applied the ops
// again meanwhile) is not the new ops's: no note, no Warning Event on it. One the new
// ops claimed is noted, in the same harness.
func TestSandboxOfAnEarlierOpsOfTheSameNameIsNotNoted(t *testing.T) {
	h := newDeletedHarness(t)
	renewed := h.ops("second-uid")
	h.setOps(renewed)
	claimedBy := func(sb *agentsv1alpha1.Sandbox, uid types.UID) *agentsv1alpha1.Sandbox {
		sb.Annotations = map[string]string{upgrade.AnnotationClaim: upgrade.ClaimValue("up", string(uid))}
		return sb
	}
	recorder := h.s.recorder.(*record.FakeRecorder)

	h.deleteSandbox(claimedBy(h.sandbox("old", "first-uid", agentsv1alpha1.UpgradingReasonPreUpgrade), "first-uid"))
	if notes := h.s.deleted.peek("ns/up", renewed.UID); notes != nil {
		t.Errorf("noted %v on the new ops for a sandbox the first one claimed", notes)
	}
	select {
	case ev := <-recorder.Events:
		t.Errorf("Event %q for a sandbox the new ops never claimed", ev)
	default:
	}

	h.deleteSandbox(claimedBy(h.sandbox("mine", "", ""), renewed.UID))
	if notes := h.s.deleted.peek("ns/up", renewed.UID); len(notes) != 1 || !strings.Contains(notes[0], "mine") {
		t.Errorf("notes %v, want one naming mine, which the new ops claimed", notes)
	}
}

// The notes of one ops are not handed to another of the same name, and a key whose ops
// is gone is forgotten.
func TestDeletedNotesBelongToOneOps(t *testing.T) {
	var d deletedNotes
	const key = "ns/up"
	d.add(key, "first", "s1 (Succeeded)")
	if got := d.peek(key, "second"); got != nil {
		t.Fatalf("peek for another ops of the name = %v, want none", got)
	}
	if got := d.peek(key, "first"); got != nil {
		t.Fatalf("after a newer ops was asked for, the first's notes are still kept: %v", got)
	}
	d.add(key, "first", "s1 (Succeeded)")
	d.add(key, "second", "s2 (PreUpgrade)")
	if got := d.peek(key, "second"); len(got) != 1 || got[0] != "s2 (PreUpgrade)" {
		t.Fatalf("peek = %v, want only the second ops's note", got)
	}
	d.drop(key, "first", []string{"s2 (PreUpgrade)"}) // a write of the first ops drops nothing of the second
	if got := d.peek(key, "second"); len(got) != 1 {
		t.Fatalf("a write of another ops dropped notes: %v", got)
	}
	d.forget(key)
	if got := d.peek(key, "second"); got != nil {
		t.Fatalf("after forget: %v", got)
	}
}

// UPDATED and TOTAL keep counting the sandboxes deleted after their upgrade however long
// the SandboxesDeleted message grows: the count is apart from the list of names, which
// alone is cut to the condition's length. A note applied again is counted once, and the
// count survives being read back from the message (statusagg restarts keep nothing else).
func TestDeletedCountSurvivesALongList(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "ops", Generation: 1}}
	const deleted = 80
	name := func(i int) string { return fmt.Sprintf("sandbox-with-a-rather-long-name-%03d", i) }
	// One sandbox after another is updated, then deleted, as syncOps writes it: the
	// counters from the selection, then the note. One more upgrades throughout.
	for i := range deleted {
		note := deletedNote(name(i), agentsv1alpha1.UpgradingReasonSucceeded)
		ops.Status = desiredOpsStatus(ops, ops, selection(1, upgrade.Updated, upgrade.Updating), nil)
		ops.Status = desiredOpsStatus(ops, ops, selection(1, upgrade.Updating), nil) // deleted: it left the selection
		withDeletedNotes(&ops.Status, []string{note}, 1)
		if i%7 == 2 { // a note applied again two deletes later (a write whose outcome was unknown)
			ops.Status = desiredOpsStatus(ops, ops, selection(1, upgrade.Updating), nil)
			withDeletedNotes(&ops.Status, []string{deletedNote(name(i-2), agentsv1alpha1.UpgradingReasonSucceeded), note}, 1)
		}
	}
	withDeletedNotes(&ops.Status, []string{deletedNote("x", agentsv1alpha1.UpgradingReasonPreUpgrade)}, 1)
	if got := updatedDeparted(ops.Status); got != deleted {
		t.Errorf("updatedDeparted = %d, want %d", got, deleted)
	}
	// The last one upgrading succeeds: UPDATED moves on, past every deleted one.
	if st := desiredOpsStatus(ops, ops, selection(1, upgrade.Updated), nil); st.UpdatedReplicas != deleted+1 || st.Replicas != deleted+1 {
		t.Errorf("after the last success: UPDATED %d, TOTAL %d; want %d and %d", st.UpdatedReplicas, st.Replicas, deleted+1, deleted+1)
	}
	c := meta.FindStatusCondition(ops.Status.Conditions, agentsv1alpha1.ConditionSandboxesDeleted)
	if len(c.Message) > agentsv1alpha1.MaxConditionMessageLength {
		t.Errorf("message is %d bytes, over the condition's cap", len(c.Message))
	}
	if want := fmt.Sprintf("%d deleted during the upgrade, %d of them after it succeeded (still counted as updated): …, ", deleted+1, deleted); !strings.HasPrefix(c.Message, want) {
		t.Errorf("message %q does not begin %q", c.Message, want)
	}
	if !strings.HasSuffix(c.Message, name(deleted-1)+" (Succeeded), x (PreUpgrade)") {
		t.Errorf("message %q does not end with the newest notes", c.Message)
	}
}

// A message written by an older statusagg (no counts, maybe cut mid-note) is read by
// counting its notes, and carries on in the counted form.
func TestDeletedLegacyMessageIsCounted(t *testing.T) {
	var st agentsv1alpha1.SandboxUpdateOpsStatus
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: agentsv1alpha1.ConditionSandboxesDeleted, Status: metav1.ConditionTrue, Reason: agentsv1alpha1.DeletedReasonDuringUpgrade,
		Message: "deleted during their upgrade: a (Succeeded), b (PreUpgrade), c (Succ"})
	if got := updatedDeparted(st); got != 1 {
		t.Fatalf("updatedDeparted of a legacy message = %d, want 1", got)
	}
	withDeletedNotes(&st, []string{"a (Succeeded)", "d (Succeeded)"}, 1)
	c := meta.FindStatusCondition(st.Conditions, agentsv1alpha1.ConditionSandboxesDeleted)
	if want := "3 deleted during the upgrade, 2 of them after it succeeded (still counted as updated): a (Succeeded), b (PreUpgrade), d (Succeeded)"; c.Message != want {
		t.Fatalf("message %q, want %q", c.Message, want)
	}
}

// deletedHarness runs syncOps and deletedHandler over listers the test fills and a fake
// API server that records the status writes.
type deletedHarness struct {
	t         *testing.T
	s         *server
	client    *fake.Clientset
	opsIdx    cache.Indexer
	sbIdx     cache.Indexer
	handler   cache.ResourceEventHandler
	namespace string
}

func newDeletedHarness(t *testing.T) *deletedHarness {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	h := &deletedHarness{t: t, client: fake.NewSimpleClientset(), opsIdx: idx(), sbIdx: idx(), namespace: "ns"}
	h.s = &server{
		agents:    h.client,
		ops:       agentslisters.NewSandboxUpdateOpsLister(h.opsIdx),
		sandboxes: agentslisters.NewSandboxLister(h.sbIdx),
		metrics:   m,
		recorder:  record.NewFakeRecorder(100),
		opsCtl:    controller.New("test-ops", func(context.Context, string) error { return nil }),
	}
	h.handler = h.s.deletedHandler()
	return h
}

// ops returns an active SandboxUpdateOps "up" of uid selecting every sandbox.
func (h *deletedHarness) ops(uid types.UID) *agentsv1alpha1.SandboxUpdateOps {
	o := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: h.namespace, UID: uid, Generation: 1}}
	o.Spec.Selector = &metav1.LabelSelector{}
	o.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"main","image":"v2"}]}}`)
	o.Status.Phase = agentsv1alpha1.SandboxUpdateOpsUpdating
	return o
}

// sandbox returns a sandbox claimed by "up", its attempt of attempt at reason (none
// when attempt is empty).
func (h *deletedHarness) sandbox(name string, attempt types.UID, reason string) *agentsv1alpha1.Sandbox {
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.namespace,
		Labels: map[string]string{agentsv1alpha1.LabelUpdateOps: "up"}}}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "v1"}}}}
	sb.Status.Phase = agentsv1alpha1.SandboxRunning
	if attempt != "" {
		recordTransition(&sb.Status.Conditions, transition{Attempt: string(attempt), New: true, To: reason}, 1, metav1.Now())
	}
	return sb
}

// setOps puts o in the cache and on the API server (replacing one of its name).
func (h *deletedHarness) setOps(o *agentsv1alpha1.SandboxUpdateOps) {
	h.t.Helper()
	if err := h.opsIdx.Update(o); err != nil {
		h.t.Fatal(err)
	}
	tracker := h.client.Tracker()
	gvr := agentsv1alpha1.SchemeGroupVersion.WithResource("sandboxupdateops")
	if _, err := h.client.AgentsV1alpha1().SandboxUpdateOps(o.Namespace).Get(context.Background(), o.Name, metav1.GetOptions{}); err == nil {
		if err := tracker.Delete(gvr, o.Namespace, o.Name); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := tracker.Create(gvr, o.DeepCopy(), o.Namespace); err != nil {
		h.t.Fatal(err)
	}
}

// removeOps deletes o from the cache and the API server.
func (h *deletedHarness) removeOps(o *agentsv1alpha1.SandboxUpdateOps) {
	h.t.Helper()
	if err := h.opsIdx.Delete(o); err != nil {
		h.t.Fatal(err)
	}
	gvr := agentsv1alpha1.SchemeGroupVersion.WithResource("sandboxupdateops")
	if err := h.client.Tracker().Delete(gvr, o.Namespace, o.Name); err != nil {
		h.t.Fatal(err)
	}
}

func (h *deletedHarness) addSandbox(sb *agentsv1alpha1.Sandbox) {
	h.t.Helper()
	if err := h.sbIdx.Add(sb); err != nil {
		h.t.Fatal(err)
	}
}

// deleteSandbox hands sb's deletion to deletedHandler, as the informer does.
func (h *deletedHarness) deleteSandbox(sb *agentsv1alpha1.Sandbox) {
	h.handler.OnDelete(sb)
}

// written is the ops as the API server holds it.
func (h *deletedHarness) written(name string) *agentsv1alpha1.SandboxUpdateOps {
	h.t.Helper()
	o, err := h.client.AgentsV1alpha1().SandboxUpdateOps(h.namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return o
}
