package deploy

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"sigs.k8s.io/yaml"
)

var natsDir = filepath.Join(repoRoot, "deploy", "nats")

// natsTLSComponent is the kustomize component that turns TLS on.
var natsTLSComponent = filepath.Join(repoRoot, "deploy", "components", "nats-tls")

// routePassword is the test's Secret molt-nats-route: hex, as the README makes it.
const routePassword = "0123456789abcdef0123456789abcdef"

// natsConfigDir writes the ConfigMap nats-config as kustomize builds it from
// deploy/nats (every file of its configMapGenerator) and, with tls, as the
// component deploy/components/nats-tls merges its files into it; the
// certificate paths of the pods' Secret mount (/etc/nats/tls) become
// tlsDir. It returns the directory, the pods' /etc/nats.
func natsConfigDir(t *testing.T, tlsDir string) string {
	t.Helper()
	dir := t.TempDir()
	copyGenerated := func(kustomizationDir string) {
		raw, err := os.ReadFile(filepath.Join(kustomizationDir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			ConfigMapGenerator []struct {
				Name  string   `json:"name"`
				Files []string `json:"files"`
			} `json:"configMapGenerator"`
		}
		if err := yaml.Unmarshal(raw, &k); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", kustomizationDir, err)
		}
		n := 0
		for _, g := range k.ConfigMapGenerator {
			if g.Name != "nats-config" {
				continue
			}
			for _, f := range g.Files {
				b, err := os.ReadFile(filepath.Join(kustomizationDir, f))
				if err != nil {
					t.Fatal(err)
				}
				if tlsDir != "" {
					b = []byte(strings.ReplaceAll(string(b), "/etc/nats/tls/", tlsDir+"/"))
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
		if n == 0 {
			t.Fatalf("%s/kustomization.yaml generates no file of the ConfigMap nats-config", kustomizationDir)
		}
	}
	copyGenerated(natsDir)
	if tlsDir != "" {
		copyGenerated(natsTLSComponent)
	}
	return dir
}

// statefulSetRoutes returns the StatefulSet's NATS_ROUTES as the kubelet
// expands it ($(NATS_ROUTE_PASSWORD) from the Secret molt-nats-route,
// $(POD_NAMESPACE) from the pod, in molt-system), with
// each node's name nats-<i>.nats.molt-system.svc:6222 replaced by
// 127.0.0.1:<routePorts[i]>.
func statefulSetRoutes(t *testing.T, routePorts []int) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(natsDir, "nats.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)- name: NATS_ROUTES\n\s+value: '([^']+)'`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("deploy/nats/nats.yaml: no env NATS_ROUTES with a quoted value")
	}
	routes := strings.NewReplacer("$(NATS_ROUTE_PASSWORD)", routePassword, "$(POD_NAMESPACE)", "molt-system").Replace(string(m[1]))
	for i, p := range routePorts {
		host := fmt.Sprintf("nats-%d.nats.molt-system.svc:6222", i)
		if !strings.Contains(routes, "route:"+routePassword+"@"+host) {
			t.Fatalf("deploy/nats/nats.yaml: NATS_ROUTES %s has no route to %s with the user route and $(NATS_ROUTE_PASSWORD)", m[1], host)
		}
		routes = strings.ReplaceAll(routes, host, "127.0.0.1:"+strconv.Itoa(p))
	}
	return routes
}

// natsNodeOptions parses dir/nats.conf with nats-server's own parser in
// the environment the StatefulSet gives node i (loopback ports instead of
// 4222, 6222 and 8222).
func natsNodeOptions(t *testing.T, dir string, i, clusterPort int, routes string) *server.Options {
	t.Helper()
	env := map[string]string{
		"NATS_SERVER_NAME":    fmt.Sprintf("nats-%d", i),
		"NATS_CLIENT_PORT":    "-1",
		"NATS_CLUSTER_PORT":   strconv.Itoa(clusterPort),
		"NATS_MONITOR_PORT":   "0",
		"NATS_ROUTES":         routes,
		"NATS_STORE_DIR":      filepath.Join(t.TempDir(), "jetstream"),
		"NATS_ROUTE_PASSWORD": routePassword,
	}
	auth, err := os.ReadFile(filepath.Join(dir, "auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range regexp.MustCompile(`\$(MOLT_NATS_PASSWORD_[A-Z]+)`).FindAllSubmatch(auth, -1) {
		env[string(v[1])] = "pw-" + strings.ToLower(string(v[1]))
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("nats-server refuses deploy/nats/nats.conf: %v", err)
	}
	opts.Host, opts.Cluster.Host = "127.0.0.1", "127.0.0.1"
	opts.NoLog, opts.NoSigs = true, true
	return opts
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		defer l.Close()
	}
	return ports
}

// startNATSCluster starts three in-process nodes from the ConfigMap in dir
// and waits until each routes to the two others and JetStream has a meta
// leader; they stop when the test ends.
func startNATSCluster(t *testing.T, dir string) []*server.Server {
	t.Helper()
	routePorts := freePorts(t, 3)
	routes := statefulSetRoutes(t, routePorts)
	var nodes []*server.Server
	for i, p := range routePorts {
		s, err := server.NewServer(natsNodeOptions(t, dir, i, p, routes))
		if err != nil {
			t.Fatalf("node nats-%d: %v", i, err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		nodes = append(nodes, s)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		formed, leader := true, false
		for _, s := range nodes {
			formed = formed && len(routedNodes(t, s)) == 2
			leader = leader || s.JetStreamIsLeader()
		}
		if formed && leader {
			return nodes
		}
		if time.Now().After(deadline) {
			var state []string
			for _, s := range nodes {
				state = append(state, fmt.Sprintf("%s: routes to %v, JetStream leader %v", s.Name(), routedNodes(t, s), s.JetStreamIsLeader()))
			}
			t.Fatalf("the 3-node cluster did not form within 30s: %s", strings.Join(state, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// routedNodes returns the names of the nodes s has a route to (several
// route connections each: nats-server pools them).
func routedNodes(t *testing.T, s *server.Server) []string {
	t.Helper()
	rz, err := s.Routez(nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rz.Routes {
		if !slices.Contains(names, r.RemoteName) {
			names = append(names, r.RemoteName)
		}
	}
	return names
}

// routeLogin sends a route's CONNECT with user and pass to the cluster port
// of s, as any process that reaches port 6222 can, and returns the server's
// first answer after it.
func routeLogin(t *testing.T, s *server.Server, user, pass string) string {
	t.Helper()
	addr := s.ClusterAddr()
	conn, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil {
		return "closed before INFO: " + err.Error()
	}
	if !strings.Contains(info, `"auth_required":true`) {
		t.Errorf("the route port of %s asks for no login: %s", s.Name(), info)
	}
	fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"pedantic\":false,\"user\":%q,\"pass\":%q,\"tls_required\":false,\"name\":\"intruder\",\"cluster\":\"molt\"}\r\nPING\r\n", user, pass)
	answer, err := r.ReadString('\n')
	if err != nil {
		return "connection closed: " + err.Error()
	}
	return strings.TrimSpace(answer)
}

// TestNATSClusterRoutesNeedThePassword runs deploy/nats as the StatefulSet
// does, on loopback: nats.conf and the files of its ConfigMap through
// nats-server's own parser, three nodes with the environment of nats.yaml
// (NATS_ROUTES carrying the route password of the Secret molt-nats-route).
// The cluster forms; a process that reaches the route port without the
// password, or with a wrong one, is refused.
func TestNATSClusterRoutesNeedThePassword(t *testing.T) {
	nodes := startNATSCluster(t, natsConfigDir(t, ""))
	for _, tc := range []struct{ name, user, pass string }{
		{"no login", "", ""},
		{"wrong password", "route", "guess"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := routeLogin(t, nodes[0], tc.user, tc.pass)
			if !strings.Contains(answer, "Authorization Violation") {
				t.Errorf("a route with %s: the server answered %q, want -ERR 'Authorization Violation'", tc.name, answer)
			}
		})
	}
	t.Run("right password", func(t *testing.T) {
		// The control: the same CONNECT with the password is taken.
		if answer := routeLogin(t, nodes[0], "route", routePassword); answer != "PONG" {
			t.Errorf("a route with the password: the server answered %q, want PONG", answer)
		}
	})
}

// TestNATSClusterWithTLSComponent runs deploy/nats with the files of
// deploy/components/nats-tls merged into its ConfigMap and a certificate as
// the README describes (server and client auth, signed by ca.crt): the
// three nodes form their cluster over TLS routes, a client with ca.crt
// connects over TLS, and a client in plain text is refused.
func TestNATSClusterWithTLSComponent(t *testing.T) {
	tlsDir := writeNATSCertificate(t)
	nodes := startNATSCluster(t, natsConfigDir(t, tlsDir))
	url := nodes[1].ClientURL()
	nc, err := nats.Connect(url, nats.UserInfo("viewer", "pw-molt_nats_password_viewer"), nats.RootCAs(filepath.Join(tlsDir, "ca.crt")), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to %s with ca.crt: %v", url, err)
	}
	defer nc.Close()
	if !nc.TLSRequired() {
		t.Error("the client connection is not TLS")
	}
	// Even with the route password, a route in plain text is refused.
	if answer := routeLogin(t, nodes[0], "route", routePassword); answer == "PONG" {
		t.Errorf("a plain-text route with the password was answered %q", answer)
	} else {
		t.Logf("a plain-text route with the password: %s", answer)
	}
	// A client that will not speak TLS: nats.go would switch to TLS by
	// itself, so speak the protocol by hand.
	conn, err := net.DialTimeout("tcp", nodes[1].Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("the client port does not require TLS: %s", info)
	}
	fmt.Fprint(conn, "CONNECT {\"verbose\":false,\"user\":\"viewer\",\"pass\":\"pw-molt_nats_password_viewer\"}\r\nPING\r\n")
	if answer, err := r.ReadString('\n'); err == nil && strings.HasPrefix(answer, "PONG") {
		t.Errorf("a plain-text client was answered %q", answer)
	}
}

// writeNATSCertificate writes what the Secret molt-nats-tls holds: ca.crt,
// and tls.crt with tls.key for 127.0.0.1 (in a cluster,
// nats.molt-system.svc and *.nats.molt-system.svc), good for server and
// client auth. It returns the directory.
func writeNATSCertificate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "molt-nats test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats.molt-system.svc"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"nats.molt-system.svc", "*.nats.molt-system.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write("ca.crt", "CERTIFICATE", caDER)
	write("tls.crt", "CERTIFICATE", der)
	write("tls.key", "EC PRIVATE KEY", keyDER)
	return dir
}
