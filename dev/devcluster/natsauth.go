package devcluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// NATSUsers are the users of deploy/nats/auth.conf: one per service, the
// history's reader and the operator's admin.
var NATSUsers = []string{"selector", "patcher", "hookrunner", "podcycler", "statusagg", "viewer", "admin"}

// NATSAuthConf is deploy/nats/auth.conf under the repository root root: the
// one auth config of the cluster, the local stack and the tests.
func NATSAuthConf(root string) string { return filepath.Join(root, "deploy", "nats", "auth.conf") }

// NATSPasswords are the local stack's (or a test run's) NATS passwords, one
// file per user in Dir (mode 0600), made once and kept.
type NATSPasswords struct {
	Dir string
	pw  map[string]string
}

// LoadNATSPasswords reads the password of every user from dir, making a
// random one for each that has none yet.
func LoadNATSPasswords(dir string) (*NATSPasswords, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("make NATS password dir: %w", err)
	}
	p := &NATSPasswords{Dir: dir, pw: map[string]string{}}
	for _, user := range NATSUsers {
		path := p.File(user)
		b, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			raw := make([]byte, 24)
			if _, err := rand.Read(raw); err != nil {
				return nil, fmt.Errorf("make NATS password of %s: %w", user, err)
			}
			b = []byte(hex.EncodeToString(raw))
			if err := os.WriteFile(path, b, 0o600); err != nil {
				return nil, fmt.Errorf("write NATS password of %s: %w", user, err)
			}
		case err != nil:
			return nil, fmt.Errorf("read NATS password of %s: %w", user, err)
		}
		p.pw[user] = strings.TrimSpace(string(b))
	}
	return p, nil
}

// File is where user's password is kept.
func (p *NATSPasswords) File(user string) string { return filepath.Join(p.Dir, user+".password") }

// Password returns user's password.
func (p *NATSPasswords) Password(user string) string { return p.pw[user] }

// ServerEnv is the environment auth.conf reads the passwords from
// (MOLT_NATS_PASSWORD_<USER>), for a nats-server process or os.Setenv.
func (p *NATSPasswords) ServerEnv() []string {
	env := make([]string, 0, len(NATSUsers))
	for _, user := range NATSUsers {
		env = append(env, NATSPasswordEnv(user)+"="+p.pw[user])
	}
	return env
}

// ServiceEnv is the environment that makes a service log in as user.
func (p *NATSPasswords) ServiceEnv(user string) []string {
	return []string{"MOLT_NATS_USER=" + user, "MOLT_NATS_PASSWORD_FILE=" + p.File(user)}
}

// ServiceArgs are the flags that make a service log in as user.
func (p *NATSPasswords) ServiceArgs(user string) []string {
	return []string{"--nats-user=" + user, "--nats-password-file=" + p.File(user)}
}

// NATSPasswordEnv names the variable auth.conf reads user's password from.
func NATSPasswordEnv(user string) string { return "MOLT_NATS_PASSWORD_" + strings.ToUpper(user) }
