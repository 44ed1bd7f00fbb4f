package statusagg

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// slowSink stands in for a busy API server: each write takes delay.
type slowSink struct {
	delay time.Duration
	mu    sync.Mutex
	byObj map[string][]string // reasons written, by involved object
}

func (s *slowSink) write(e *corev1.Event) (*corev1.Event, error) {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	key := e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name
	s.byObj[key] = append(s.byObj[key], e.Reason)
	return e, nil
}

func (s *slowSink) Create(e *corev1.Event) (*corev1.Event, error) { return s.write(e) }
func (s *slowSink) Update(e *corev1.Event) (*corev1.Event, error) { return s.write(e) }
func (s *slowSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	return s.write(e)
}

func (s *slowSink) written() (objects, events int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, reasons := range s.byObj {
		events += len(reasons)
	}
	return len(s.byObj), events
}

// A burst of Events as a 1500-sandbox ops makes them on a slow API server:
// each sandbox's start and success, far faster than one writer writes. Every
// one must be written, and an object's Events in the order they were made.
// With one writer (client-go's own broadcaster) about 1000 wait and the rest
// are dropped.
func TestEventsOfABurstAreAllWritten(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &slowSink{delay: 2 * time.Millisecond, byObj: map[string][]string{}}
	rec, stop := newRecorder(ctx, sink, eventWriters)
	defer stop()

	const sandboxes = 1500
	for _, reason := range []string{EventUpgradeStarted, EventUpgradeSucceeded} {
		for i := range sandboxes {
			sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{
				Namespace: "ns", Name: fmt.Sprintf("sb-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i)),
			}}
			rec.Eventf(sb, corev1.EventTypeNormal, reason, "attempt %d", i)
		}
	}

	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("all %d Events of %d sandboxes written (none dropped)", 2*sandboxes, sandboxes), func() (bool, error) {
		objects, events := sink.written()
		return objects == sandboxes && events == 2*sandboxes, fmt.Errorf("%d Events of %d sandboxes written", events, objects)
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for key, reasons := range sink.byObj {
		if len(reasons) != 2 || reasons[0] != EventUpgradeStarted || reasons[1] != EventUpgradeSucceeded {
			t.Errorf("Events of %s written as %v, want [%s %s]", key, reasons, EventUpgradeStarted, EventUpgradeSucceeded)
		}
	}
}
