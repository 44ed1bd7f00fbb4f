package service

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
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
//
// While it campaigns, rt's readiness check "leader-election" fails when the
// API server refuses the Lease (RBAC, or a policy): a replica that can never
// lead would otherwise look ready while no replica works.
func (l LeaderElection) Run(ctx context.Context, rt *Runtime, work func(context.Context) error) error {
	if !l.Enabled {
		return work(ctx)
	}
	return runLeaderElected(ctx, rt, l.Namespace, l.LeaseName, work)
}

// refusalLock is a Lease lock that remembers the API server's last refusal
// (Forbidden) of a read or write of the Lease, until one succeeds.
type refusalLock struct {
	resourcelock.Interface
	refused atomic.Pointer[error]
}

func (l *refusalLock) note(err error) {
	switch {
	case err == nil:
		l.refused.Store(nil)
	case apierrors.IsForbidden(err):
		l.refused.Store(&err)
	}
}

func (l *refusalLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, raw, err := l.Interface.Get(ctx)
	if !apierrors.IsNotFound(err) {
		l.note(err)
	}
	return r, raw, err
}

func (l *refusalLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, r)
	l.note(err)
	return err
}

func (l *refusalLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, r)
	l.note(err)
	return err
}

func runLeaderElected(ctx context.Context, rt *Runtime, namespace, leaseName string, work func(context.Context) error) error {
	kube := rt.Kube
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("read hostname for leader election identity: %w", err)
	}
	identity := host + "_" + string(uuid.NewUUID())
	lease := klog.KRef(namespace, leaseName)
	logger := klog.FromContext(ctx).WithValues("lease", lease, "identity", identity)

	leading := make(chan context.Context, 1)
	lock := &refusalLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: leaseName},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}}
	rt.AddReadyCheck("leader-election", func() error {
		if err := lock.refused.Load(); err != nil {
			return fmt.Errorf("the API server refuses Lease %s: %v: grant this service's ServiceAccount get, create and update on leases in namespace %s (deploy/base does)", lease, *err, namespace)
		}
		return nil
	})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
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
