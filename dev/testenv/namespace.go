package testenv

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var nonName = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a namespace of the test's own and deletes it when the
// test ends (without waiting: the controller-manager finishes it).
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	base := strings.Trim(nonName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "-")
	}
	name := fmt.Sprintf("%s-%04x", base, rand.IntN(0x10000))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"molt.dev/test": "true"}}}
	if _, err := e.Kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		err := e.Kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", name, err)
		}
	})
	return name
}

// Eventually polls cond every interval until it returns true or timeout
// passes; then it fails the test with the last error cond returned.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Consistently checks cond every interval for the whole of d and fails the
// test the first time it does not hold: for proving that something does not
// happen (no extra admission while paused, say).
func Consistently(t testing.TB, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ok, err := cond(); !ok {
			t.Fatalf("%s no longer holds: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Background runs run(ctx) for the rest of the test; when the test ends it
// calls before (if not nil), cancels ctx, and fails the test if run returned
// an error or does not return within wait. exited reports whether run has
// returned already (and its error): a service that stopped early.
func Background(t testing.TB, name string, wait time.Duration, run func(ctx context.Context) error, before func()) (exited func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { runErr = run(ctx); close(done) }()
	t.Cleanup(func() {
		if before != nil {
			before()
		}
		cancel()
		select {
		case <-done:
			if runErr != nil {
				t.Errorf("%s: %v", name, runErr)
			}
		case <-time.After(wait):
			t.Errorf("%s did not return within %s of cancel", name, wait)
		}
	})
	return func() (bool, error) {
		select {
		case <-done:
			return true, runErr
		default:
			return false, nil
		}
	}
}

// HTTPGet returns the status code and body of GET http://addr+path, or 0 and
// the error.
func HTTPGet(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
