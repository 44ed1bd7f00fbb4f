package service

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/klog/v2"
)

// connLogQuiet is how long after logging a connection problem the same kind of problem is
// logged only at V(2): nats.go retries every ReconnectWait (500ms), and a refused subject
// may be asked for on every watchdog check.
const connLogQuiet = 30 * time.Second

// connLog logs what nats.go reports about a service's NATS connection only through its
// callbacks. connectNATS retries for ever, also after an authorization error, so a wrong
// password never comes back as the error of a call, and a subject the server refuses to
// this user only as a timeout of whoever waited for the answer: without these lines both
// look like a JetStream that does not answer.
//
// Each problem is logged with the server, the user and the next step for an operator. A
// problem of the same kind (authorization, TLS, permissions, connection, other) within
// connLogQuiet of the last one logged is logged at V(2) only, and the next one after that
// at V(0) again with how many came meanwhile. A connect or reconnect forgets them, so the
// first problem after it is logged at once.
type connLog struct {
	logger klog.Logger // with the server and the user
	auth   NATSAuth
	tls    NATSTLS
	quiet  time.Duration
	now    func() time.Time

	mu   sync.Mutex
	seen map[string]*seenProblem // by kind
}

// seenProblem is when a kind of problem was last logged at V(0), and how many of that
// kind were logged only at V(2) since.
type seenProblem struct {
	logged time.Time
	quiet  int
}

// newConnLog returns a connLog for a connection as opts say, logging through logger.
func newConnLog(logger klog.Logger, opts Options) *connLog {
	kv := []any{"server", RedactURL(opts.NATSURL)}
	switch {
	case opts.NATSAuth.User != "":
		kv = append(kv, "user", opts.NATSAuth.User)
	case opts.NATSAuth.CredsFile != "":
		kv = append(kv, "creds", opts.NATSAuth.CredsFile)
	}
	return &connLog{logger: logger.WithValues(kv...), auth: opts.NATSAuth, tls: opts.NATSTLS, quiet: connLogQuiet, now: time.Now, seen: map[string]*seenProblem{}}
}

// options are the nats.go callbacks that log through l.
func (l *connLog) options() []nats.Option {
	return []nats.Option{
		nats.ConnectHandler(func(nc *nats.Conn) { l.connected("Connected to NATS", nc) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { l.connected("Reconnected to NATS", nc) }),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			l.problem("Cannot connect to NATS; retrying", true, err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil { // closed by the service (shutdown)
				l.logger.V(2).Info("Disconnected from NATS")
				return
			}
			l.problem("Disconnected from NATS; reconnecting", true, err)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				l.problem("NATS reported an error", false, err, "subject", sub.Subject)
				return
			}
			l.problem("NATS reported an error", false, err)
		}),
	}
}

// connected logs msg and forgets the problems seen before.
func (l *connLog) connected(msg string, nc *nats.Conn) {
	l.mu.Lock()
	clear(l.seen)
	l.mu.Unlock()
	l.logger.Info(msg, "url", nc.ConnectedUrlRedacted())
}

// problem logs err with the next step, at V(0) unless its kind was logged less than
// l.quiet ago. connecting says the connection is down (a failed connect or a disconnect),
// not that a connected server reported an error.
func (l *connLog) problem(msg string, connecting bool, err error, kv ...any) {
	kind, next := l.nextStep(err, connecting)
	kv = append(kv, "next", next)
	now := l.now()
	l.mu.Lock()
	p := l.seen[kind]
	if p != nil && now.Sub(p.logged) < l.quiet {
		p.quiet++
		l.mu.Unlock()
		l.logger.V(2).Info(msg, append(kv, "err", err)...)
		return
	}
	if p == nil {
		p = &seenProblem{}
		l.seen[kind] = p
	}
	if p.quiet > 0 {
		kv = append(kv, "sinceLastLogged", fmt.Sprintf("%d more in %s", p.quiet, now.Sub(p.logged).Round(time.Second)))
	}
	p.logged, p.quiet = now, 0
	l.mu.Unlock()
	l.logger.Error(err, msg, kv...)
}

// nextStep returns the kind of a connection error and what an operator should check.
func (l *connLog) nextStep(err error, connecting bool) (kind, next string) {
	switch {
	case isAuthError(err):
		return "authorization", l.auth.credentialsHint()
	case IsTLSError(err):
		return "tls", l.tls.hint(err)
	case errors.Is(err, nats.ErrPermissionViolation):
		user := l.auth.User
		if user == "" {
			user = "this service's user"
		}
		return "permissions", fmt.Sprintf("check the publish/subscribe permissions of %s in the NATS config (deploy/nats/auth.conf)", user)
	case errors.Is(err, nats.ErrSlowConsumer):
		return "other", "the service reads messages slower than they arrive; JetStream redelivers what was dropped and not acknowledged after its ack wait"
	case connecting:
		return "connection", "check that NATS runs and is reachable at the flag --nats-url (env MOLT_NATS_URL); retrying"
	}
	return "other", "see the NATS server's log"
}

// credentialsHint is what to check after the server refused a's login.
func (a NATSAuth) credentialsHint() string {
	switch {
	case a.CredsFile != "":
		return fmt.Sprintf("check the NATS credentials in %s (flag --nats-creds, env MOLT_NATS_CREDS)", a.CredsFile)
	case a.User != "":
		return fmt.Sprintf("check the NATS credentials in the flags --nats-user and --nats-password-file (env MOLT_NATS_USER, MOLT_NATS_PASSWORD_FILE): "+
			"the password in %s must be the one the NATS config gives user %s", a.PasswordFile, a.User)
	}
	return "the NATS server wants credentials: set the flags --nats-user and --nats-password-file (env MOLT_NATS_USER, MOLT_NATS_PASSWORD_FILE) or --nats-creds (env MOLT_NATS_CREDS)"
}

// isAuthError reports whether the server refused the login.
func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}
