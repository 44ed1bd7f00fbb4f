package podcycler

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"molt.dev/pkg/upgrade"
)

// podBuilders remembers, per sandbox key, the upgrade attempt that built the last pod
// the pod informer showed under that name (upgrade.AnnotationPodAttempt) and the ops it
// ran for ("" for a direct attempt); a pod built by none clears it. It is kept through
// the pod's delete, so a sync that finds the pod missing can tell whose pod went
// (unshownDirectPodGone). It is fed by the handler that enqueues the sandbox, before
// it does, so the sync a delete queues already sees it. It is not durable: after a
// restart a missing pod's builder is not known, as before it was kept. The zero value
// is ready to use.
type podBuilders struct {
	m sync.Map // key → podBuilder
}

// podBuilder is what podBuilders keeps of a pod: the attempt that built it and its ops,
// the sandbox that controlled it (a sandbox deleted and created again under the same
// name is another), and when it was created.
type podBuilder struct {
	attempt, ops string
	sandbox      types.UID
	created      time.Time
}

// saw records pod, the latest the informer showed under key.
func (b *podBuilders) saw(key string, pod *corev1.Pod) {
	ref := metav1.GetControllerOf(pod)
	if attempt := pod.Annotations[upgrade.AnnotationPodAttempt]; attempt != "" && ref != nil {
		b.m.Store(key, podBuilder{attempt: attempt, ops: pod.Annotations[upgrade.AnnotationPodOps], sandbox: ref.UID, created: pod.CreationTimestamp.Time})
		return
	}
	b.m.Delete(key)
}

// of returns what was kept of the last pod seen under key; ok is false when
// none was built by an attempt.
func (b *podBuilders) of(key string) (p podBuilder, ok bool) {
	v, ok := b.m.Load(key)
	if !ok {
		return podBuilder{}, false
	}
	return v.(podBuilder), true
}

// forget drops key (its sandbox is gone).
func (b *podBuilders) forget(key string) { b.m.Delete(key) }
