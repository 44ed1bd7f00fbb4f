package service

import (
	"context"
	"flag"
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

// LeaderElection makes the replicas of a service elect one leader through a
// Kubernetes Lease; only the leader does the work that must have one writer.
type LeaderElection struct {
	// Enabled is off only for a single replica or tests.
	Enabled bool
	// Namespace and LeaseName name the Lease.
	Namespace string
	LeaseName string
}

// RegisterFlags adds --leader-elect and --leader-election-namespace.
func (l *LeaderElection) RegisterFlags(fs *flag.FlagSet, env *Env, leaseName string) {
	l.LeaseName = leaseName
	fs.BoolVar(&l.Enabled, "leader-elect", env.Bool("MOLT_LEADER_ELECT", true),
		"elect one working replica through the Lease "+leaseName+" (env MOLT_LEADER_ELECT)")
	fs.StringVar(&l.Namespace, "leader-election-namespace", env.String("MOLT_LEADER_ELECTION_NAMESPACE", "kube-system"),
		"namespace of the leader election Lease (env MOLT_LEADER_ELECTION_NAMESPACE)")
}

// Validate names the flag that cannot work.
func (l LeaderElection) Validate() error {
	if l.Enabled && l.Namespace == "" {
		return fmt.Errorf("flag --leader-election-namespace: must not be empty with --leader-elect")
	}
	return nil
}

// Run runs work directly when election is off; otherwise it campaigns for
// the Lease and runs work while this replica holds it. It returns nil once
// ctx is cancelled, work's own error, or an error when the lease is lost:
// the process should restart and campaign again rather than keep working
// from a stale view.
func (l LeaderElection) Run(ctx context.Context, kube kubernetes.Interface, work func(context.Context) error) error {
	if !l.Enabled {
		return work(ctx)
	}
	return runLeaderElected(ctx, kube, l.Namespace, l.LeaseName, work)
}

func runLeaderElected(ctx context.Context, kube kubernetes.Interface, namespace, leaseName string, work func(context.Context) error) error {
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("read hostname for leader election identity: %w", err)
	}
	identity := host + "_" + string(uuid.NewUUID())
	lease := klog.KRef(namespace, leaseName)
	logger := klog.FromContext(ctx).WithValues("lease", lease, "identity", identity)

	leading := make(chan context.Context, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: leaseName},
			Client:     kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		Name:            leaseName,
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
