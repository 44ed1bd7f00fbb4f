package service_test

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"molt.dev/pkg/service"
)

// TestRunProbe: `<binary> probe <url>` exits 0 on a 2xx answer and 1
// otherwise, saying on stderr what was asked and what came back, and never
// printing a password that is part of the URL.
func TestRunProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			_, _ = w.Write([]byte("ok\n"))
		case "/readyz":
			http.Error(w, "not ready: nats: connection to nats://127.0.0.1:4222 is RECONNECTING", http.StatusServiceUnavailable)
		case "/empty":
			w.WriteHeader(http.StatusInternalServerError)
		case "/moved":
			http.Redirect(w, r, "/healthz", http.StatusFound)
		}
	}))
	defer srv.Close()
	closed := closedAddr(t)

	for _, tc := range []struct {
		name        string
		args        []string
		wantCode    int
		wantOut     string
		wantErr     []string
		notInOutput string
	}{
		{name: "2xx", args: []string{srv.URL + "/healthz"}, wantCode: 0, wantOut: "selector: probe " + srv.URL + "/healthz: ok"},
		{name: "redirect to 2xx", args: []string{srv.URL + "/moved"}, wantCode: 0},
		{name: "503 with a reason", args: []string{srv.URL + "/readyz"}, wantCode: 1,
			wantErr: []string{"selector: probe " + srv.URL + "/readyz: answered 503 Service Unavailable: not ready: nats: connection"}},
		{name: "500 without a body", args: []string{srv.URL + "/empty"}, wantCode: 1, wantErr: []string{"answered 500 Internal Server Error\n"}},
		{name: "nothing listens", args: []string{"http://" + closed + "/"}, wantCode: 1,
			wantErr: []string{"selector: probe http://" + closed + "/: no answer: dial tcp " + closed + ": connect: connection refused"}},
		{name: "password is not printed", args: []string{"http://molt:s3cret@" + closed + "/"}, wantCode: 1,
			wantErr: []string{"probe http://molt:xxxxx@" + closed + "/: no answer"}, notInOutput: "s3cret"},
		{name: "not an http URL", args: []string{"nats://127.0.0.1:4222"}, wantCode: 1, wantErr: []string{`probe "nats://127.0.0.1:4222": not an http:// or https:// URL`}},
		{name: "no URL", args: nil, wantCode: 1, wantErr: []string{"usage: selector probe <url>"}},
		{name: "two URLs", args: []string{srv.URL, srv.URL}, wantCode: 1, wantErr: []string{"usage: selector probe <url>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := service.RunProbe("selector", tc.args, &stdout, &stderr)
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d (stdout %q, stderr %q)", code, tc.wantCode, stdout.String(), stderr.String())
			}
			if tc.wantOut != "" && !strings.Contains(stdout.String(), tc.wantOut) {
				t.Errorf("stdout %q, want it to contain %q", stdout.String(), tc.wantOut)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr %q, want it to contain %q", stderr.String(), want)
				}
			}
			if tc.wantCode == 0 && stderr.Len() > 0 {
				t.Errorf("stderr %q on success, want nothing", stderr.String())
			}
			if tc.notInOutput != "" && strings.Contains(stdout.String()+stderr.String(), tc.notInOutput) {
				t.Errorf("output %q contains %q", stdout.String()+stderr.String(), tc.notInOutput)
			}
		})
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
