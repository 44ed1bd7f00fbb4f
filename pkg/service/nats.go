package service

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/klog/v2"
)

// NATSAuth is how a service logs in to NATS: a user with a password file,
// a credentials (JWT) file, or nothing (a server without auth). See
// deploy/nats/auth.conf for the users and what each may do.
type NATSAuth struct {
	// User is the NATS user; with PasswordFile.
	User string
	// PasswordFile holds the user's password (a mounted Secret). It is read
	// at every connect and reconnect, so a rotated password is picked up
	// without a restart.
	PasswordFile string
	// CredsFile is a NATS credentials file (decentralized JWT auth), instead
	// of User and PasswordFile.
	CredsFile string
}

// validate reports a combination that cannot log in, naming the flags.
func (a NATSAuth) validate() error {
	switch {
	case a.CredsFile != "" && (a.User != "" || a.PasswordFile != ""):
		return errors.New("flag --nats-creds: use either it or --nats-user with --nats-password-file, not both")
	case a.User != "" && a.PasswordFile == "":
		return fmt.Errorf("flag --nats-user=%s: needs --nats-password-file", a.User)
	case a.PasswordFile != "" && a.User == "":
		return fmt.Errorf("flag --nats-password-file=%s: needs --nats-user", a.PasswordFile)
	}
	return nil
}

// InboxPrefix is the reply-subject prefix of a NATS user's connection:
// deploy/nats/auth.conf lets each user subscribe only to its own, so no user
// reads another's replies.
func InboxPrefix(user string) string {
	if user == "" {
		return nats.InboxPrefix[:len(nats.InboxPrefix)-1]
	}
	return "_INBOX_" + user
}

// options are the nats.go options that log in as a says. Reading the
// password file fails the connect attempt, naming the file.
func (a NATSAuth) options() ([]nats.Option, error) {
	opts := []nats.Option{nats.CustomInboxPrefix(InboxPrefix(a.User))}
	switch {
	case a.CredsFile != "":
		if _, err := os.Stat(a.CredsFile); err != nil {
			return nil, fmt.Errorf("NATS credentials (flag --nats-creds): %w", err)
		}
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	case a.User != "":
		if _, err := readPassword(a.PasswordFile); err != nil {
			return nil, err
		}
		file, user := a.PasswordFile, a.User
		opts = append(opts, nats.UserInfoHandler(func() (string, string) {
			pw, err := readPassword(file)
			if err != nil {
				// The connect attempt then fails as an authorization
				// error and is retried; the file may be being rotated.
				return user, ""
			}
			return user, pw
		}))
	}
	return opts, nil
}

// readPassword reads a password file, trimming the line end an editor or
// `kubectl create secret --from-file` may leave.
func readPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read NATS password (flag --nats-password-file): %w", err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("read NATS password (flag --nats-password-file): %s is empty", path)
	}
	return pw, nil
}

// connectNATS connects as opts say, retrying for ever in the background
// (JetStream holds the work meanwhile), including after an authorization
// error: a password being rotated is refused until both sides have it. What
// happens to the connection (refused logins and subjects, disconnects,
// reconnects) is logged through ctx's logger (connLog).
func connectNATS(ctx context.Context, opts Options) (*nats.Conn, error) {
	auth, err := opts.NATSAuth.options()
	if err != nil {
		return nil, err
	}
	secure, err := opts.NATSTLS.Options()
	if err != nil {
		return nil, err
	}
	logs := newConnLog(klog.FromContext(ctx), opts)
	nc, err := nats.Connect(opts.NATSURL, slices.Concat(auth, secure, logs.options(), []nats.Option{
		nats.Name("molt-" + opts.Name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.IgnoreAuthErrorAbort(),
	})...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s (flag --nats-url): %w", RedactURL(opts.NATSURL), err)
	}
	return nc, nil
}

// RedactURL returns a NATS URL (or a comma-separated list of them) fit to
// print: any user and password in it are replaced by "redacted".
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			if strings.Contains(p, "@") {
				parts[i] = "(a URL with credentials, not shown)"
			}
			continue
		}
		u.User = url.User("redacted")
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
