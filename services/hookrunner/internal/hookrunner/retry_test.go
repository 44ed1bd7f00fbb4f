package hookrunner

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// errReset is what agentruntime.Exec returns when the runtime reset the connection.
var errReset = fmt.Errorf("connection to the agent-runtime at http://127.0.0.1:49983 was reset: %w", agentruntime.ErrConnectionLost)

// A reset connection is called again, with the same tag (so the runtime hands back the run
// that may have started), at most maxResets times; other errors are not retried.
func TestRunRetriesAResetConnectionWithTheSameTag(t *testing.T) {
	hook := &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/backup"}}}
	sb := &agentsv1alpha1.Sandbox{}
	pod := &corev1.Pod{Status: corev1.PodStatus{PodIP: "127.0.0.1"}}
	const tag = "molt/attempt-1/PreUpgrade"
	ok := agentruntime.Result{Exited: true}
	for _, tc := range []struct {
		name      string
		errs      []error // the calls' errors in order; past the end, the call succeeds
		wantCalls int
		wantErr   error
	}{
		{name: "one reset, then the run's end", errs: []error{errReset}, wantCalls: 2},
		{name: "resets up to the bound", errs: []error{errReset, errReset, errReset}, wantCalls: maxResets + 1},
		{name: "one reset too many", errs: []error{errReset, errReset, errReset, errReset}, wantCalls: maxResets + 1, wantErr: agentruntime.ErrConnectionLost},
		{name: "a timeout is not retried", errs: []error{agentruntime.ErrTimeout}, wantCalls: 1, wantErr: agentruntime.ErrTimeout},
		{name: "unauthenticated is not retried", errs: []error{agentruntime.ErrUnauthenticated}, wantCalls: 1, wantErr: agentruntime.ErrUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tags []string
			h := &HookRunner{reachWait: time.Second, exec: func(_ context.Context, req agentruntime.ExecRequest) (agentruntime.Result, error) {
				tags = append(tags, req.Tag)
				if i := len(tags) - 1; i < len(tc.errs) {
					return agentruntime.Result{}, tc.errs[i]
				}
				return ok, nil
			}}
			res, err := h.run(context.Background(), sb, pod, hook, tag)
			if len(tags) != tc.wantCalls {
				t.Errorf("calls = %d, want %d", len(tags), tc.wantCalls)
			}
			for i, got := range tags {
				if got != tag {
					t.Errorf("call %d tag = %q, want %q", i, got, tag)
				}
			}
			switch {
			case tc.wantErr == nil && (err != nil || !res.Succeeded()):
				t.Errorf("run = %+v, %v; want the run's success", res, err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("run error = %v, want %v", err, tc.wantErr)
			}
		})
	}
}
