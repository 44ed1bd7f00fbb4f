package devruntime_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"molt.dev/dev/devruntime"
	"molt.dev/pkg/agentruntime"
)

// Every call must carry the sandbox's token; a sandbox without one accepts
// no call at all.
func TestAccessTokenIsAlwaysRequired(t *testing.T) {
	var mu sync.Mutex
	token := ""
	setToken := func(s string) { mu.Lock(); token = s; mu.Unlock() }
	url := serve(t, devruntime.Target{AccessToken: func() string { mu.Lock(); defer mu.Unlock(); return token }})

	for _, tc := range []struct {
		name     string
		sandbox  string // the sandbox's token annotation
		sent     string // X-Access-Token
		accepted bool
	}{
		{name: "sandbox without a token, none sent", sandbox: "", sent: ""},
		{name: "sandbox without a token, one sent", sandbox: "", sent: "anything"},
		{name: "no token sent", sandbox: "s3cret", sent: ""},
		{name: "wrong token", sandbox: "s3cret", sent: "s3creT"},
		{name: "token's prefix", sandbox: "s3cret", sent: "s3c"},
		{name: "longer token", sandbox: "s3cret", sent: "s3cret0"},
		{name: "the sandbox's token", sandbox: "s3cret", sent: "s3cret", accepted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setToken(tc.sandbox)
			res, err := agentruntime.Exec(context.Background(), agentruntime.ExecRequest{
				BaseURL: url, AccessToken: tc.sent, Command: []string{"/bin/bash", "-c", "echo ran"}, Timeout: 10 * time.Second,
			})
			switch {
			case tc.accepted && (err != nil || res.Stdout != "ran\n"):
				t.Errorf("Exec = %+v, %v; want the command run", res, err)
			case !tc.accepted && !errors.Is(err, agentruntime.ErrUnauthenticated):
				t.Errorf("Exec = %+v, %v; want %v", res, err, agentruntime.ErrUnauthenticated)
			}
			// Over plain HTTP the refusal is a 401, before anything is read.
			req, err := http.NewRequest(http.MethodPost, url+"/process.Process/Start", strings.NewReader(""))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/connect+proto")
			if tc.sent != "" {
				req.Header.Set("X-Access-Token", tc.sent)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("POST: %v", err)
			}
			_ = resp.Body.Close()
			if refused := resp.StatusCode == http.StatusUnauthorized; refused == tc.accepted {
				t.Errorf("POST answered %s; accepted=%v", resp.Status, tc.accepted)
			}
		})
	}
}

// A runtime whose pod no longer holds its address answers every call with
// 503 (unreachable to the caller, who retries), neither running it nor
// refusing its token: the call was meant for the address's new pod, maybe
// the same sandbox's, with the same token.
func TestStaleRuntimeAnswersUnavailable(t *testing.T) {
	var mu sync.Mutex
	stale := false
	url := serve(t, devruntime.Target{
		AccessToken: func() string { return "s3cret" },
		Stale:       func() bool { mu.Lock(); defer mu.Unlock(); return stale },
	})
	call := func(token string) (agentruntime.Result, error) {
		return agentruntime.Exec(context.Background(), agentruntime.ExecRequest{
			BaseURL: url, AccessToken: token, Command: []string{"/bin/bash", "-c", "echo ran"}, Timeout: 10 * time.Second,
		})
	}
	if _, err := call("other"); !errors.Is(err, agentruntime.ErrUnauthenticated) {
		t.Errorf("wrong token, address held: %v; want %v", err, agentruntime.ErrUnauthenticated)
	}
	mu.Lock()
	stale = true
	mu.Unlock()
	if _, err := call("other"); !errors.Is(err, agentruntime.ErrUnreachable) || errors.Is(err, agentruntime.ErrUnauthenticated) {
		t.Errorf("wrong token, address gone to another pod: %v; want %v", err, agentruntime.ErrUnreachable)
	}
	if res, err := call("s3cret"); !errors.Is(err, agentruntime.ErrUnreachable) {
		t.Errorf("right token, address gone to another pod: %+v, %v; want %v", res, err, agentruntime.ErrUnreachable)
	}
	mu.Lock()
	stale = false
	mu.Unlock()
	if res, err := call("s3cret"); err != nil || res.Stdout != "ran\n" {
		t.Errorf("right token, address held: %+v, %v; want the command run", res, err)
	}
}
