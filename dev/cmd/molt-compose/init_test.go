package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"molt.dev/dev/devcluster"
)

// TestInit: init makes the kubeconfigs, keys and passwords, keeps them when
// run again, and writes a NATS auth config that nats-server accepts, with
// every user of deploy/nats/auth.conf and the password of its file.
func TestInit(t *testing.T) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	uid := os.Getuid()
	c := initConfig{
		pkiDir: filepath.Join(dir, "pki"), kubeDir: filepath.Join(dir, "kube"), natsDir: filepath.Join(dir, "nats"),
		natsAuthConf: devcluster.NATSAuthConf(root), hostDir: filepath.Join(dir, "host"),
		server: "https://kube-apiserver:6443", hostServer: "https://127.0.0.1:17443",
		controlPlaneUID: uid, natsUID: uid,
		uids:  ownerFlag{"selector": uid},
		chown: ownerFlag{filepath.Join(dir, "data"): uid},
	}
	if err := c.run(); err != nil {
		t.Fatalf("init: %v", err)
	}
	host, err := os.ReadFile(filepath.Join(c.hostDir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(host), "server: https://127.0.0.1:17443") {
		t.Errorf("the host's kubeconfig does not name the published port:\n%s", host)
	}
	kube, err := os.ReadFile(filepath.Join(c.kubeDir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kube), "server: https://kube-apiserver:6443") {
		t.Errorf("the containers' kubeconfig does not name kube-apiserver:\n%s", kube)
	}
	for _, f := range []string{"sa.key", "sa.pub", "tokens.csv", "admin.token"} {
		if _, err := os.Stat(filepath.Join(c.pkiDir, f)); err != nil {
			t.Errorf("pki: %v", err)
		}
	}
	if fi, err := os.Stat(filepath.Join(c.natsDir, "selector.password")); err != nil || fi.Mode().Perm() != 0o400 {
		t.Errorf("selector's password file: %v, mode %v: want 0400", err, fi.Mode())
	}

	passwords, err := devcluster.LoadNATSPasswords(c.natsDir)
	if err != nil {
		t.Fatal(err)
	}
	// Run again: nothing changes (the volumes outlive a `docker compose down`).
	if err := c.run(); err != nil {
		t.Fatalf("init again: %v", err)
	}
	again, err := os.ReadFile(filepath.Join(c.hostDir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(host) {
		t.Error("a second init made a new admin token")
	}

	// The server's config: a file that includes init's, as docker-compose.yaml's does.
	conf := filepath.Join(c.natsDir, "server.conf")
	if err := os.WriteFile(conf, []byte("port: -1\ninclude ./auth.conf\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server refuses init's auth.conf: %v", err)
	}
	got := map[string]string{}
	for _, u := range opts.Users {
		got[u.Username] = u.Password
	}
	for _, user := range devcluster.NATSUsers {
		if got[user] != passwords.Password(user) || got[user] == "" {
			t.Errorf("nats-server has user %s with password %q, want the one of %s", user, got[user], passwords.File(user))
		}
	}
}
