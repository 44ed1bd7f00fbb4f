package podcycler

import "sync"

// inFlight is the set of sandboxes whose pod this process is replacing right now (between
// deleting the old pod and creating the new one). The lifecycle loop leaves a missing pod
// of such a sandbox to the upgrade handler, so one upgrade creates one pod.
//
// It is only an in-process guard against the lifecycle loop racing the handler; what
// survives a restart is on the pod (pod-template-hash, molt.dev/attempt) and the sandbox
// status, which the handler re-reads on redelivery.
type inFlight struct {
	mu   sync.Mutex
	keys map[string]int
}

func newInFlight() *inFlight { return &inFlight{keys: map[string]int{}} }

// begin marks key as being upgraded; the returned func unmarks it.
func (f *inFlight) begin(key string) (end func()) {
	f.mu.Lock()
	f.keys[key]++
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.keys[key]--; f.keys[key] <= 0 {
				delete(f.keys, key)
			}
		})
	}
}

// has reports whether key is being upgraded by this process.
func (f *inFlight) has(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keys[key] > 0
}
