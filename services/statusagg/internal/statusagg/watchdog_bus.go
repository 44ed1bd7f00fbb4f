package statusagg

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// EventStreamUnreachable is the Warning Event on an ops (a direct attempt's
// sandbox) whose stalled stages the watchdog cannot re-drive because NATS
// does not take its publishes: what else shows only in statusagg's log.
const EventStreamUnreachable = "StreamUnreachable"

// busWarnEvery bounds how often EventStreamUnreachable goes to one object.
const busWarnEvery = 2 * time.Minute

// busStall is an object to warn of stalled stages that could not be re-driven.
type busStall struct {
	obj       runtime.Object
	uid       types.UID
	sandboxes []string
}

// addBusStall counts sb's stalled stage against its ops (its own sandbox for
// a direct attempt).
func addBusStall(m map[types.UID]*busStall, ops *agentsv1alpha1.SandboxUpdateOps, sb *agentsv1alpha1.Sandbox) map[types.UID]*busStall {
	var obj runtime.Object = sb
	uid := sb.UID
	if ops != nil {
		obj, uid = ops, ops.UID
	}
	if m[uid] == nil {
		m[uid] = &busStall{obj: obj, uid: uid}
	}
	m[uid].sandboxes = append(m[uid].sandboxes, sb.Name)
	return m
}

// warnBusDown sends each object with stalled stages a broken publish could
// not re-drive a Warning Event (at most every busWarnEvery): a hung hook
// and a broken event stream look the same in the status otherwise.
func (w *watchdog) warnBusDown(stalled map[types.UID]*busStall, cause error) {
	if len(stalled) == 0 {
		return
	}
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.busWarned == nil {
		w.busWarned = map[types.UID]time.Time{}
	}
	for uid, st := range stalled {
		if last, ok := w.busWarned[uid]; ok && now.Sub(last) < busWarnEvery {
			continue
		}
		w.busWarned[uid] = now
		slices.Sort(st.sandboxes)
		w.s.recorder.Eventf(st.obj, corev1.EventTypeWarning, EventStreamUnreachable,
			"%s %s past their stage's deadline (%s) and cannot be re-driven: NATS does not take statusagg's publishes (%v); nothing is lost, and the stages go on once NATS is back (one still without progress after --redrives + 3 deadlines is failed all the same, saying NATS could not be used): check NATS (its pods, `make status` locally) and that the services reach it",
			upgrade.Sandboxes(len(st.sandboxes)), upgrade.Agree(len(st.sandboxes), "is", "are"), namedList(st.sandboxes), cause)
	}
	for uid, last := range w.busWarned {
		if now.Sub(last) > 2*busWarnEvery {
			delete(w.busWarned, uid)
		}
	}
}
