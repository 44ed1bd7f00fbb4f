package podcycler

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// createdPodTTL bounds how long a create this process sent keeps the lifecycle loop
// from sending another for the same sandbox while the pod cache does not show the pod.
// The cache shows a new pod within a second or two even while a thousand are created
// at once; a pod it never shows (created and deleted at once, or lost in a relist) is
// created again when this runs out.
const createdPodTTL = 15 * time.Second

// createdPods remembers, per sandbox key, a pod create this process sent, until the pod
// informer reports any change of a pod of that name. A new sandbox is synced several
// times in its first second (its access-token write, statusagg's status writes, its
// pod's own changes), and each sync that ran before the pod cache showed the new pod
// sent the create again, only for the API server to refuse it as AlreadyExists: 0.9
// refused creates per sandbox when 200 were created at once.
//
// It only ever delays a create, by at most createdPodTTL, and the sync it skips is
// queued again for when the entry runs out. It is not durable and need not be: an entry
// lost in a restart costs one refused create. The zero value is ready to use.
type createdPods struct {
	mu sync.Mutex
	m  map[string]createdPod
}

type createdPod struct {
	sandbox types.UID
	until   time.Time
}

// expect records that a pod of the sandbox key (uid sandbox) is being created now. It
// is called before the create is sent, so a pod event that arrives before the create
// returns still clears it (forget).
func (c *createdPods) expect(key string, sandbox types.UID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]createdPod{}
	}
	c.m[key] = createdPod{sandbox: sandbox, until: now.Add(createdPodTTL)}
}

// forget drops key's entry: the pod informer reported a pod of that name added,
// changed or deleted, so the cache now says whether the pod exists; or the create
// failed; or the sandbox is gone.
func (c *createdPods) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// pending returns how much longer a sync of key, which found no pod in the cache,
// should leave the create it sent for sandbox to show up; 0 when there is none to wait
// for (no entry, one of an earlier sandbox of the same name, or one that ran out, which
// it forgets).
func (c *createdPods) pending(key string, sandbox types.UID, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return 0
	}
	if e.sandbox != sandbox || !now.Before(e.until) {
		delete(c.m, key)
		return 0
	}
	return e.until.Sub(now)
}
