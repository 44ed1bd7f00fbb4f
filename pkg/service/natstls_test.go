package service

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// testPKI is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, as PEM files in dir.
type testPKI struct {
	ca                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
	dir                   string
	caFile                string
	serverCert, serverKey string // PEM files
	clientCert, clientKey string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "molt test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.caKey = key
	p.caFile = p.write(t, "ca.crt", "CERTIFICATE", der)
	p.serverCert, p.serverKey = p.issue(t, "server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = p.issue(t, "client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// issue makes a certificate for 127.0.0.1 signed by the CA and returns its
// cert and key files.
func (p *testPKI) issue(t *testing.T, name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".crt", "CERTIFICATE", der), p.write(t, name+".key", "EC PRIVATE KEY", keyDER)
}

func (p *testPKI) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startTLSNATS starts an in-process NATS server that requires TLS with
// p's server certificate (and, with verifyClients, a client certificate of
// p's CA), and user patcher/pw; it stops when the test ends.
func startTLSNATS(t *testing.T, p *testPKI, verifyClients bool) *server.Server {
	t.Helper()
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: p.serverCert, KeyFile: p.serverKey, CaFile: p.caFile, Verify: verifyClients})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TLS: true, TLSConfig: tc, TLSVerify: verifyClients, TLSTimeout: 2,
		Users: []*server.User{{Username: "patcher", Password: "pw"}},
	})
	if err != nil {
		t.Fatalf("new nats server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("nats server not ready for connections within 10s")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// waitConnected polls until nc is connected.
func waitConnected(t *testing.T, nc *nats.Conn, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for nc.Status() != nats.CONNECTED {
		if time.Now().After(deadline) {
			t.Fatalf("connection is %s with last error %v, want connected", nc.Status(), nc.LastError())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConnectNATSOverTLS: with the CA of the server's certificate
// (--nats-tls-ca) a service connects over TLS, to a nats:// as to a tls://
// URL, and with a client certificate (--nats-tls-cert, --nats-tls-key) to a
// server that verifies its clients. Without the CA it keeps retrying, and
// its log says the handshake failed and which flag to set.
func TestConnectNATSOverTLS(t *testing.T) {
	p := newTestPKI(t)
	srv := startTLSNATS(t, p, false)
	addr := srv.Addr().String()
	pw := passwordFile(t, "pw")
	auth := NATSAuth{User: "patcher", PasswordFile: pw}

	for _, tc := range []struct {
		name string
		url  string
	}{
		{"nats URL", "nats://" + addr},
		{"tls URL", "tls://" + addr},
	} {
		t.Run("with the CA, "+tc.name, func(t *testing.T) {
			ctx, _ := bufferedLogger(t, 0)
			nc, err := connectNATS(ctx, Options{Name: "patcher", NATSURL: tc.url, NATSAuth: auth, NATSTLS: NATSTLS{CAFile: p.caFile}})
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			waitConnected(t, nc, 5*time.Second)
			if !nc.TLSRequired() {
				t.Error("connected, but not over TLS")
			}
		})
	}

	verifying := startTLSNATS(t, p, true)
	t.Run("without the client certificate a verifying server wants", func(t *testing.T) {
		ctx, entries := bufferedLogger(t, 0)
		nc, err := connectNATS(ctx, Options{Name: "patcher", NATSURL: "tls://" + verifying.Addr().String(), NATSAuth: auth, NATSTLS: NATSTLS{CAFile: p.caFile}})
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		// TLS 1.3: the server's "certificate required" alert arrives after
		// the handshake, as a remote error rather than nats.ErrTLS.
		e, kv := waitLoggedFunc(t, entries, "a TLS error", IsTLSError, 5*time.Second)
		t.Logf("logged: %s: %v %s", e.Message, e.Err, kv)
		if !strings.Contains(kv, "--nats-tls-cert and --nats-tls-key") {
			t.Errorf("the log entry does not name the client certificate flags: %s", kv)
		}
	})
	t.Run("with a client certificate", func(t *testing.T) {
		ctx, _ := bufferedLogger(t, 0)
		nc, err := connectNATS(ctx, Options{Name: "patcher", NATSURL: "tls://" + verifying.Addr().String(), NATSAuth: auth,
			NATSTLS: NATSTLS{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey}})
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		waitConnected(t, nc, 5*time.Second)
	})

	t.Run("without the CA", func(t *testing.T) {
		ctx, entries := bufferedLogger(t, 0)
		nc, err := connectNATS(ctx, Options{Name: "patcher", NATSURL: "tls://" + addr, NATSAuth: auth})
		if err != nil {
			t.Fatalf("connectNATS without the CA: %v, want a connection retrying in the background", err)
		}
		defer nc.Close()
		e, kv := waitLoggedFunc(t, entries, "an unknown authority", func(err error) bool {
			var unknown x509.UnknownAuthorityError
			return errors.As(err, &unknown)
		}, 5*time.Second)
		t.Logf("logged: %s: %v %s", e.Message, e.Err, kv)
		for _, want := range []string{"--nats-tls-ca", "MOLT_NATS_TLS_CA", addr} {
			if !strings.Contains(kv, want) {
				t.Errorf("the log entry %q does not name %q: %s", e.Message, want, kv)
			}
		}
		if nc.Status() == nats.CONNECTED {
			t.Error("connected without the CA")
		}
	})
}

// TestConnectNATSWantsTLS: a CA set makes TLS required, so a server that
// offers no TLS is refused (and the log says so) rather than talked to in
// plain text.
func TestConnectNATSWantsTLS(t *testing.T) {
	p := newTestPKI(t)
	srv := startNATS(t, &server.User{Username: "patcher", Password: "pw"})
	ctx, entries := bufferedLogger(t, 0)
	nc, err := connectNATS(ctx, Options{Name: "patcher", NATSURL: srv.ClientURL(),
		NATSAuth: NATSAuth{User: "patcher", PasswordFile: passwordFile(t, "pw")}, NATSTLS: NATSTLS{CAFile: p.caFile}})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	e, kv := waitLogged(t, entries, nats.ErrSecureConnWanted, 5*time.Second)
	t.Logf("logged: %s: %v %s", e.Message, e.Err, kv)
	if !strings.Contains(kv, "offers no TLS") {
		t.Errorf("the log entry does not say the server offers no TLS: %s", kv)
	}
}

// TestNATSTLSFiles: a TLS file that cannot be used fails the start, naming
// the flag, the file and the cause; a certificate without its key (or the
// reverse) fails validation, naming both flags.
func TestNATSTLSFiles(t *testing.T) {
	p := newTestPKI(t)
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.crt")
	for _, tc := range []struct {
		name string
		tls  NATSTLS
		want []string
	}{
		{"missing CA", NATSTLS{CAFile: missing}, []string{"--nats-tls-ca", missing, "no such file"}},
		{"CA that is no PEM", NATSTLS{CAFile: notPEM}, []string{"--nats-tls-ca", notPEM, "failed to parse"}},
		{"key of another certificate", NATSTLS{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.serverKey},
			[]string{"--nats-tls-cert", "--nats-tls-key", p.clientCert, "private key does not match"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, _ := bufferedLogger(t, 0)
			nc, err := connectNATS(ctx, Options{Name: "patcher", NATSURL: "tls://127.0.0.1:1", NATSTLS: tc.tls})
			if err == nil {
				nc.Close()
				t.Fatal("connectNATS succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	for _, tc := range []struct {
		tls  NATSTLS
		want string
	}{
		{NATSTLS{CertFile: "/c"}, "--nats-tls-cert=/c: needs --nats-tls-key"},
		{NATSTLS{KeyFile: "/k"}, "--nats-tls-key=/k: needs --nats-tls-cert"},
	} {
		o := Options{Name: "x", NATSURL: "nats://x", HTTPAddr: ":1", KubeQPS: 1, KubeBurst: 1, ShutdownTimeout: time.Second, NATSTLS: tc.tls}
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() with %+v = %v, want %q", tc.tls, err, tc.want)
		}
	}
}
