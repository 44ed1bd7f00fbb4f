package molt

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	versioned "molt.dev/pkg/generated/clientset/versioned"
)

// claimedSandboxes lists the sandboxes labelled with the ops.
func claimedSandboxes(ctx context.Context, agents versioned.Interface, ops *agentsv1alpha1.SandboxUpdateOps) ([]agentsv1alpha1.Sandbox, error) {
	list, err := agents.AgentsV1alpha1().Sandboxes(ops.Namespace).List(ctx, metav1.ListOptions{LabelSelector: agentsv1alpha1.LabelUpdateOps + "=" + ops.Name})
	if err != nil {
		return nil, fmt.Errorf("list the sandboxes of ops %s/%s: %w", ops.Namespace, ops.Name, err)
	}
	return list.Items, nil
}

// getOps reads an ops, turning NotFound into a message that says what to do.
func getOps(ctx context.Context, agents versioned.Interface, ns, name string) (*agentsv1alpha1.SandboxUpdateOps, error) {
	ops, err := agents.AgentsV1alpha1().SandboxUpdateOps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, &exitError{code: ExitError, msg: fmt.Sprintf("SandboxUpdateOps %s/%s not found: list the ops with `kubectl get suo -n %s`", ns, name, ns), notFound: true}
	}
	if err != nil {
		return nil, fmt.Errorf("get SandboxUpdateOps %s/%s: %w", ns, name, err)
	}
	return ops, nil
}

// loadOps returns the clients' agents interface, the namespace and the ops
// named name in it.
func (a *app) loadOps(ctx context.Context, name string) (versioned.Interface, string, *agentsv1alpha1.SandboxUpdateOps, error) {
	agents, _, ns, err := a.clients()
	if err != nil {
		return nil, "", nil, err
	}
	ops, err := getOps(ctx, agents, ns, name)
	return agents, ns, ops, err
}

func phaseOf(ops *agentsv1alpha1.SandboxUpdateOps) string {
	if ops.Status.Phase == "" {
		return string(agentsv1alpha1.SandboxUpdateOpsPending)
	}
	return string(ops.Status.Phase)
}

// deleteAndWait deletes ops (by UID) and waits until it is gone: molt's
// selector removes its label from the sandboxes, then the finalizer.
func deleteAndWait(ctx context.Context, agents versioned.Interface, ops *agentsv1alpha1.SandboxUpdateOps, timeout time.Duration) error {
	uid := ops.UID
	err := agents.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).Delete(ctx, ops.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete SandboxUpdateOps %s/%s: %w", ops.Namespace, ops.Name, err)
	}
	what := fmt.Sprintf("waiting for the deleted SandboxUpdateOps %s/%s to go (its finalizer is removed once its sandboxes are released): it is deleted all the same; `kubectl get suo %s -n %s` shows when it is gone", ops.Namespace, ops.Name, ops.Name, ops.Namespace)
	return poll(ctx, timeout, what, func() (bool, error) {
		cur, err := agents.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).Get(ctx, ops.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != uid) {
			return true, nil
		}
		return false, err
	}, func() string {
		return fmt.Sprintf("SandboxUpdateOps %s/%s is still there %s after it was deleted: molt's selector removes its finalizer once its sandboxes are released; is the selector running? (`kubectl describe suo %s -n %s`)",
			ops.Namespace, ops.Name, timeout, ops.Name, ops.Namespace)
	})
}

// poll calls cond every second until it is true, the context ends or
// timeout passes (then the error is what timedOut says).
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error), timedOut func() string) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		var stop stopPolling
		if errors.As(err, &stop) {
			return &exitError{code: ExitError, msg: stop.msg}
		}
		if time.Now().After(deadline) {
			msg := timedOut()
			if err != nil {
				msg += fmt.Sprintf(" (last error: %v)", err)
			}
			return &exitError{code: ExitError, msg: msg}
		}
		select {
		case <-ctx.Done():
			return &exitError{code: ExitError, msg: "interrupted while " + what}
		case <-time.After(time.Second):
		}
	}
}

// stopPolling is an error of poll's cond that waiting longer cannot mend:
// poll ends at once with its message.
type stopPolling struct{ msg string }

func (s stopPolling) Error() string { return s.msg }
