package selector

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// starts remembers, per namespace, the ops this process last admitted
// sandboxes for. upgrade.ActiveOps decides from the cache, which may not
// show yet the patch check or the claims of an ops this process has just
// started: two ops created in the same second (the admission policy lets
// both through then), synced by two workers, could each take itself for
// the active one and both admit a batch. Recorded before the first label
// write, the start holds while that ops holds the namespace.
type starts struct {
	mu sync.Mutex
	m  map[string]types.UID
}

// take records ops as the one admitting in its namespace and returns "",
// unless another ops that still holds the namespace (in all, the namespace's
// ops as read) was recorded first: then its name, and nothing is recorded.
func (st *starts) take(ops *agentsv1alpha1.SandboxUpdateOps, all []*agentsv1alpha1.SandboxUpdateOps) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	if uid, ok := st.m[ops.Namespace]; ok && uid != ops.UID {
		for _, o := range all {
			if o.UID == uid && upgrade.HoldsNamespace(o) {
				return o.Name
			}
		}
	}
	if st.m == nil {
		st.m = map[string]types.UID{}
	}
	st.m[ops.Namespace] = ops.UID
	return ""
}
