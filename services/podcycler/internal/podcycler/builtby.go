package podcycler

import (
	"sync"

	corev1 "k8s.io/api/core/v1"

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

type podBuilder struct{ attempt, ops string }

// saw records pod, the latest the informer showed under key.
func (b *podBuilders) saw(key string, pod *corev1.Pod) {
	if attempt := pod.Annotations[upgrade.AnnotationPodAttempt]; attempt != "" {
		b.m.Store(key, podBuilder{attempt: attempt, ops: pod.Annotations[upgrade.AnnotationPodOps]})
		return
	}
	b.m.Delete(key)
}

// of returns the attempt that built the last pod seen under key, and its ops.
func (b *podBuilders) of(key string) (attempt, ops string) {
	v, ok := b.m.Load(key)
	if !ok {
		return "", ""
	}
	p := v.(podBuilder)
	return p.attempt, p.ops
}

// forget drops key (its sandbox is gone).
func (b *podBuilders) forget(key string) { b.m.Delete(key) }
