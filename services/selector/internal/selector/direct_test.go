package selector

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A template edited again before statusagg recorded the direct attempt the
// first edit started waits: the status alone does not show that attempt in
// progress, and a second one beside it would back up and replace the same
// pod at once. Once the status shows it, or after directRecordWait, the
// memory no longer holds anything back.
func TestDirectWaitsForTheAttemptItRequestedToBeRecorded(t *testing.T) {
	d := &direct{}
	now := time.Now()
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{UID: "sb-1"}}
	const key, first, second = "ns/sbx", "direct-r5-5", "direct-r6-6"

	if prev, wait := d.unrecorded(key, sb, first, now); wait != 0 || prev != "" {
		t.Fatalf("nothing requested yet: %q, %s", prev, wait)
	}
	d.requested(key, sb, first, now)
	if prev, wait := d.unrecorded(key, sb, second, now.Add(time.Second)); prev != first || wait <= 0 || wait > directRecordWait {
		t.Errorf("the next edit before the first attempt is recorded: %q, %s; want to wait for %s", prev, wait, first)
	}
	if _, wait := d.unrecorded(key, sb, first, now.Add(time.Second)); wait != 0 {
		t.Errorf("the same attempt again (a republish) waits %s", wait)
	}

	recorded := sb.DeepCopy()
	recorded.Status.Conditions = []metav1.Condition{{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: "Attempt", Message: first}}
	if _, wait := d.unrecorded(key, recorded, second, now.Add(time.Second)); wait != 0 {
		t.Errorf("once the status shows the first attempt, the memory waits %s (the status decides)", wait)
	}

	d.requested(key, sb, first, now)
	if _, wait := d.unrecorded(key, sb, second, now.Add(directRecordWait)); wait != 0 {
		t.Errorf("after directRecordWait the next edit still waits %s", wait)
	}
	d.requested(key, sb, first, now)
	other := sb.DeepCopy()
	other.UID = "sb-2" // deleted and created again
	if _, wait := d.unrecorded(key, other, second, now.Add(time.Second)); wait != 0 {
		t.Errorf("a sandbox created again under the name waits %s for its predecessor's attempt", wait)
	}
}
