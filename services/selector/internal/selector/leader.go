package selector

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Lease timings: client-go's usual values.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// runLeaderElected campaigns for the Lease LeaseName in namespace and runs
// work while this replica holds it. It returns nil once ctx is cancelled,
// work's own error, or an error when the lease is lost: the process should
// restart and campaign again rather than keep admitting from a stale view.
func runLeaderElected(ctx context.Context, kube kubernetes.Interface, namespace string, work func(context.Context) error) error {
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("read hostname for leader election identity: %w", err)
	}
	identity := host + "_" + string(uuid.NewUUID())
	lease := klog.KRef(namespace, LeaseName)
	logger := klog.FromContext(ctx).WithValues("lease", lease, "identity", identity)

	leading := make(chan context.Context, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: LeaseName},
			Client:     kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		Name:            LeaseName,
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { leading <- ctx },
			OnStoppedLeading: func() { logger.Info("Stopped leading") },
		},
	})
	if err != nil {
		return fmt.Errorf("configure leader election on lease %s: %w", lease, err)
	}

	electCtx, stopElection := context.WithCancel(ctx)
	defer stopElection()
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		elector.Run(electCtx)
	}()
	logger.Info("Campaigning for leadership")

	select {
	case <-elected:
		return nil // ctx was cancelled before this replica led
	case leadCtx := <-leading:
		logger.Info("Started leading")
		workErr := work(leadCtx)
		stopElection()
		<-elected
		switch {
		case ctx.Err() != nil:
			return nil
		case leadCtx.Err() != nil:
			return fmt.Errorf("lost leadership of lease %s", lease)
		default:
			return workErr
		}
	}
}
