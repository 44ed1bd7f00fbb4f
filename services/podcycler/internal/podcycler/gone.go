package podcycler

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// podGone wakes the waits for a pod name to become free (waitNameFree) when
// the pod informer sees a pod of that name deleted, so a recreate starts as
// soon as the old pod is gone instead of at the next poll. It also remembers
// when this process last saw each name's pod go (missingSince), until a pod of
// that name is seen again or the sandbox is forgotten. The zero value is ready
// to use.
type podGone struct {
	mu sync.Mutex
	m  map[string][]chan struct{}
	// seen is when the informer last showed key's pod deleted.
	seen map[string]time.Time
	now  func() time.Time
}

// wait returns a channel closed at the next delete of the pod key
// (namespace/name) the informer sees, and a func that stops waiting.
func (g *podGone) wait(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string][]chan struct{}{}
	}
	g.m[key] = append(g.m[key], ch)
	return ch, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		list := g.m[key]
		for i, c := range list {
			if c == ch {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(g.m, key)
		} else {
			g.m[key] = list
		}
	}
}

// deleted wakes every wait for key and records when key's pod went.
func (g *podGone) deleted(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now
	if g.now != nil {
		now = g.now
	}
	g.record(key, now())
	g.wake(key)
}

// missingSince returns when this process first knew key's pod gone: when the
// informer showed its delete, or else now, which it records. A pod can be
// missing from the lister before the delete reaches this handler (the informer
// updates its store before it notifies), and a process that starts sees only
// that the pod is not there; either way the name has been free since at most
// now, so a grace counted from here never runs out early.
func (g *podGone) missingSince(key string, now time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.seen[key]; ok {
		return t
	}
	g.record(key, now)
	return now
}

// record notes that key's pod was gone at t; the caller holds mu.
func (g *podGone) record(key string, t time.Time) {
	if g.seen == nil {
		g.seen = map[string]time.Time{}
	}
	g.seen[key] = t
}

// forget drops what g remembers of key's pod going.
func (g *podGone) forget(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.seen, key)
}

// replaced wakes every wait for key when the informer shows a pod of that name
// with a new UID: the old pod went between two looks (a relist shows that as
// an update, without a delete). A pod has the name again, so nothing is
// recorded as missing.
func (g *podGone) replaced(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.seen, key)
	g.wake(key)
}

// wake ends every wait for key; the caller holds mu.
func (g *podGone) wake(key string) {
	for _, ch := range g.m[key] {
		close(ch)
	}
	delete(g.m, key)
}

// handler tells g about the pod informer's deletes and replacements, and
// forgets a name's delete when a pod of that name appears again. Only a
// sandbox's pod's delete is remembered (the sandbox's sync forgets it once
// the sandbox is gone).
func (g *podGone) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				g.forget(pod.Namespace + "/" + pod.Name)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Pod)
			cur, ok2 := newObj.(*corev1.Pod)
			if ok1 && ok2 && old.UID != cur.UID {
				g.replaced(cur.Namespace + "/" + cur.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			key := pod.Namespace + "/" + pod.Name
			if _, ok := ownerSandbox(pod); !ok {
				// Not a sandbox's pod (the informer also shows other
				// pods with a pod-template-hash label, a Deployment's):
				// a wait for the name still ends, nothing is recorded,
				// as no sandbox's sync would ever forget it.
				g.mu.Lock()
				g.wake(key)
				g.mu.Unlock()
				return
			}
			g.deleted(key)
		},
	}
}
