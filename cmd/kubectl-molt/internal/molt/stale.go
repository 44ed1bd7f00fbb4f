package molt

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// statusaggLease is the Lease statusagg's replicas elect their one writer
// with (statusagg.LeaseName), looked for in molt's namespace of deploy/
// and in the local stack's.
const statusaggLease = "molt-statusagg"

var statusaggLeaseNamespaces = []string{"molt-system", "kube-system"}

// staleAfter is how long after its last renewal a Lease says that no
// statusagg runs: twice its duration (15 s), so a leader change or a
// slow renewal does not warn.
const staleAfter = 30 * time.Second

// releasedFor is how long a Lease released by its holder may stay without
// one before it says that no statusagg runs.
const releasedFor = 5 * time.Second

// leaseLooker says, at most every leaseLookEvery, whether statusagg's
// Lease shows that none runs, so the status shown is not being updated.
type leaseLooker struct {
	kube       kubernetes.Interface
	namespaces []string
	last       time.Time
	said       string
}

const leaseLookEvery = 10 * time.Second

// look returns the warning to show ("" when statusagg runs, or when its
// Lease cannot be read: leader election off, another namespace, no RBAC).
func (l *leaseLooker) look(ctx context.Context, now time.Time) string {
	if !l.last.IsZero() && now.Sub(l.last) < leaseLookEvery {
		return l.said
	}
	l.last = now
	l.said = ""
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, ns := range l.namespaces {
		lease, err := l.kube.CoordinationV1().Leases(ns).Get(ctx, statusaggLease, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err == nil {
			l.said = staleLease(lease, now)
		}
		break
	}
	return l.said
}

// staleLease is the warning for statusagg's Lease as read at now: "" while
// a holder renews it.
func staleLease(lease *coordinationv1.Lease, now time.Time) string {
	where := fmt.Sprintf("Lease %s/%s", lease.Namespace, lease.Name)
	next := fmt.Sprintf("start it (`make up` on the local stack; else `kubectl get pods -n %s`, and its log says why it stopped); if statusagg runs with --leader-elect=false, this Lease is left from before: delete it (`kubectl delete lease %s -n %s`)",
		lease.Namespace, lease.Name, lease.Namespace)
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	if holder == "" {
		// Released by a replica that stopped: a standby takes it within
		// its retry period (2 s).
		if lease.Spec.RenewTime != nil && now.Sub(lease.Spec.RenewTime.Time) < releasedFor {
			return ""
		}
		return fmt.Sprintf("no statusagg runs (its %s has no holder): the counts and conditions shown are not being updated; %s", where, next)
	}
	if lease.Spec.RenewTime == nil {
		return ""
	}
	if age := now.Sub(lease.Spec.RenewTime.Time); age > staleAfter {
		return fmt.Sprintf("no statusagg runs (its %s was last renewed %s ago, by %s): the counts and conditions shown are not being updated; %s", where, age.Round(time.Second), holder, next)
	}
	return ""
}
