package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// SyncFunc brings the world in line for one key ("namespace/name"). Returning
// an error requeues the key with backoff; returning nil forgets it.
type SyncFunc func(ctx context.Context, key string) error

// Controller runs a SyncFunc over a rate-limited work queue.
type Controller struct {
	name  string
	sync  SyncFunc
	queue workqueue.TypedRateLimitingInterface[string]
}

// Option configures a Controller.
type Option func(*workqueue.TypedRateLimitingQueueConfig[string])

// WithMetrics has the controller's queue report to m, under the
// controller's name; nil reports nothing.
func WithMetrics(m *QueueMetrics) Option {
	return func(c *workqueue.TypedRateLimitingQueueConfig[string]) {
		if m != nil {
			c.MetricsProvider = m
		}
	}
}

// New returns a controller named name (used in logs and the queue's metrics).
func New(name string, sync SyncFunc, opts ...Option) *Controller {
	cfg := workqueue.TypedRateLimitingQueueConfig[string]{Name: name}
	for _, o := range opts {
		o(&cfg)
	}
	return &Controller{
		name: name,
		sync: sync,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
			),
			cfg,
		),
	}
}

// Enqueue adds obj's key; it accepts tombstones from delete events.
func (c *Controller) Enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("%s: key of %T: %w", c.name, obj, err))
		return
	}
	c.queue.Add(key)
}

// EnqueueKey adds a key directly.
func (c *Controller) EnqueueKey(key string) { c.queue.Add(key) }

// EnqueueAfter adds a key after a delay (for deadlines).
func (c *Controller) EnqueueAfter(key string, d time.Duration) { c.queue.AddAfter(key, d) }

// Handler returns informer event handlers that enqueue every add, update and
// delete.
func (c *Controller) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    c.Enqueue,
		UpdateFunc: func(_, obj any) { c.Enqueue(obj) },
		DeleteFunc: c.Enqueue,
	}
}

// Run waits for the caches, starts workers and blocks until ctx is cancelled;
// it returns after every worker has finished its current item.
func (c *Controller) Run(ctx context.Context, workers int, synced ...cache.InformerSynced) error {
	logger := klog.FromContext(ctx).WithValues("controller", c.name)
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("%s: caches did not sync before shutdown", c.name)
	}
	logger.V(1).Info("workers starting", "workers", workers)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNextWorkItem(ctx) {
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// conflictsBeforeError is how many Conflicts in a row a key's sync meets
// before they are logged as errors.
const conflictsBeforeError = 5

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		switch {
		case ctx.Err() != nil:
		case apierrors.IsConflict(err) && c.queue.NumRequeues(key) < conflictsBeforeError:
			// Another writer moved the object since it was read: the
			// retry reads it again. Routine, not an error to page on,
			// unless it keeps coming (a cache that does not catch up).
			klog.FromContext(ctx).V(1).Info("sync met a newer version of the object, will retry", "controller", c.name, "key", key, "err", err)
		default:
			klog.FromContext(ctx).Error(err, "sync failed, will retry", "controller", c.name, "key", key)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}
