package molt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHistoryTLSFlags: a TLS file history cannot use fails before any
// connect, naming the flag, the file and why; a certificate needs its key.
func TestHistoryTLSFlags(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.crt")
	for _, tc := range []struct {
		name string
		o    natsOptions
		want []string
	}{
		{"missing CA", natsOptions{tlsCA: missing}, []string{"--nats-tls-ca", missing, "no such file"}},
		{"CA that is no PEM", natsOptions{tlsCA: notPEM}, []string{"--nats-tls-ca", notPEM, "failed to parse"}},
		{"certificate without key", natsOptions{tlsCert: notPEM}, []string{"--nats-tls-cert", notPEM, "needs --nats-tls-key"}},
		{"unusable certificate", natsOptions{tlsCert: notPEM, tlsKey: missing}, []string{"--nats-tls-cert", notPEM, missing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.url = "tls://127.0.0.1:1"
			_, err := o.connect()
			if err == nil {
				t.Fatal("connect succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
