package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"molt.dev/dev/devcluster"
)

// ownerFlag is a repeated NAME=UID flag.
type ownerFlag map[string]int

func (o ownerFlag) String() string { return fmt.Sprint(map[string]int(o)) }

func (o ownerFlag) Set(v string) error {
	name, uid, ok := strings.Cut(v, "=")
	n, err := strconv.Atoi(uid)
	if !ok || name == "" || err != nil || n < 0 {
		return fmt.Errorf("%q: want NAME=UID", v)
	}
	o[name] = n
	return nil
}

// initConfig is what init makes, and where.
type initConfig struct {
	pkiDir, kubeDir, natsDir, natsAuthConf, hostDir string
	server, hostServer                              string
	// controlPlaneUID owns the keys (kube-apiserver writes its serving
	// certificate next to them); natsUID owns the server's auth config.
	controlPlaneUID, natsUID int
	// uids are the uid of each NATS user's service: its password file is
	// readable by that uid only (users without one: by root only).
	uids ownerFlag
	// chown gives each data volume (DIR=UID) to the uid that writes it.
	chown ownerFlag
}

func initCommand(args []string) error {
	c := initConfig{uids: ownerFlag{}, chown: ownerFlag{}}
	fs := flag.NewFlagSet("init", flag.ExitOnError)
	fs.StringVar(&c.pkiDir, "pki-dir", "/pki", "the control plane's keys and token file")
	fs.StringVar(&c.kubeDir, "kube-dir", "/kube", "where the containers' kubeconfig goes")
	fs.StringVar(&c.natsDir, "nats-dir", "/nats", "the NATS passwords and the server's auth config")
	fs.StringVar(&c.natsAuthConf, "nats-auth-conf", "/deploy/nats/auth.conf", "deploy/nats/auth.conf")
	fs.StringVar(&c.hostDir, "host-dir", "/host", "the host's directory for its kubeconfig and the viewer's NATS password (owned by the host's user)")
	fs.StringVar(&c.server, "server", "https://kube-apiserver:6443", "the API server as the containers reach it")
	fs.StringVar(&c.hostServer, "host-server", "https://127.0.0.1:17443", "the API server as the host reaches it (its published port)")
	fs.IntVar(&c.controlPlaneUID, "control-plane-uid", 65532, "uid of kube-apiserver and kube-controller-manager")
	fs.IntVar(&c.natsUID, "nats-uid", 65532, "uid of the NATS server")
	fs.Var(c.uids, "uid", "NATS user's service uid, USER=UID (repeat)")
	fs.Var(c.chown, "chown", "data volume and its writer, DIR=UID (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return c.run()
}

func (c initConfig) run() error {
	for _, d := range []string{c.pkiDir, c.kubeDir, c.natsDir, c.hostDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	auth, err := devcluster.WriteControlPlaneAuth(c.pkiDir)
	if err != nil {
		return err
	}
	if err := chownTree(c.pkiDir, c.controlPlaneUID); err != nil {
		return err
	}
	// The containers' kubeconfig is read by services of several uids.
	if err := writeFile(filepath.Join(c.kubeDir, "kubeconfig"), devcluster.KubeconfigYAML(c.server, auth.Token), 0o644, 0); err != nil {
		return err
	}
	host, err := ownerOf(c.hostDir)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.hostDir, "kubeconfig"), devcluster.KubeconfigYAML(c.hostServer, auth.Token), 0o600, host); err != nil {
		return err
	}

	passwords, err := devcluster.LoadNATSPasswords(c.natsDir)
	if err != nil {
		return err
	}
	if err := os.Chmod(c.natsDir, 0o755); err != nil {
		return fmt.Errorf("chmod %s: %w", c.natsDir, err)
	}
	for _, user := range devcluster.NATSUsers {
		uid, ok := c.uids[user]
		if !ok {
			uid = 0
		}
		if err := chown(passwords.File(user), uid, 0o400); err != nil {
			return err
		}
	}
	if err := writeFile(filepath.Join(c.hostDir, "nats-viewer.password"), passwords.Password("viewer"), 0o600, host); err != nil {
		return err
	}
	conf, err := serverAuthConf(c.natsAuthConf, passwords)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.natsDir, "auth.conf"), conf, 0o400, c.natsUID); err != nil {
		return err
	}

	for dir, uid := range c.chown {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		if err := chownTree(dir, uid); err != nil {
			return err
		}
	}
	fmt.Printf("init: keys in %s, kubeconfig %s (the host's: %s, server %s), NATS passwords in %s\n",
		c.pkiDir, filepath.Join(c.kubeDir, "kubeconfig"), filepath.Join(c.hostDir, "kubeconfig"), c.hostServer, c.natsDir)
	return nil
}

// serverAuthConf is auth.conf with the passwords defined above it: the NATS
// server resolves auth.conf's $MOLT_NATS_PASSWORD_<USER> from the
// environment or from a variable of the same file (not from another file it
// includes), and a container's environment is fixed before init runs.
func serverAuthConf(authConf string, passwords *devcluster.NATSPasswords) (string, error) {
	body, err := os.ReadFile(authConf)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", authConf, err)
	}
	var b strings.Builder
	b.WriteString("# Written by molt-compose init: the passwords, then deploy/nats/auth.conf verbatim.\n")
	for _, user := range devcluster.NATSUsers {
		fmt.Fprintf(&b, "%s: %q\n", devcluster.NATSPasswordEnv(user), passwords.Password(user))
	}
	b.WriteString("\n")
	b.Write(body)
	return b.String(), nil
}

func writeFile(path, content string, mode os.FileMode, uid int) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := chown(tmp, uid, mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// chown gives path to uid (and the group of the same number) with mode.
func chown(path string, uid int, mode os.FileMode) error {
	if err := os.Chown(path, uid, uid); err != nil {
		return fmt.Errorf("chown %s to %d: %w", path, uid, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	return nil
}

func chownTree(dir string, uid int) error {
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, uid, uid); err != nil {
			return fmt.Errorf("chown %s to %d: %w", path, uid, err)
		}
		return nil
	})
}

// ownerOf returns the uid that owns dir (the host's user, for a bind mount).
func ownerOf(dir string) (int, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, fmt.Errorf("stat %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("stat " + dir + ": no owner")
	}
	return int(st.Uid), nil
}
