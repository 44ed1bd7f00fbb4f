package podcycler

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// podGone wakes the waits for a pod name to become free (waitNameFree) when
// the pod informer sees a pod of that name deleted, so a recreate starts as
// soon as the old pod is gone instead of at the next poll. The zero value is
// ready to use.
type podGone struct {
	mu sync.Mutex
	m  map[string][]chan struct{}
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

// deleted wakes every wait for key.
func (g *podGone) deleted(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ch := range g.m[key] {
		close(ch)
	}
	delete(g.m, key)
}

// handler tells g about the pod informer's deletes.
func (g *podGone) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			g.deleted(pod.Namespace + "/" + pod.Name)
		}
	}}
}
