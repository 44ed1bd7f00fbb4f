package molt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"molt.dev/pkg/service"
)

// How kubectl molt history logs in to NATS: its flags, the password's
// source, the connection and what a refused one says.

// natsOptions say how history logs in to NATS. The defaults are the local
// stack's (`make up`): the viewer user, its password in
// .molt/nats-auth/viewer.password, found beside the kubeconfig
// .molt/kubeconfig or in the current directory.
type natsOptions struct {
	url          string
	user         string
	passwordFile string
	// kubeconfig is the --kubeconfig flag's value ("" for $KUBECONFIG):
	// the local stack's password lies beside its kubeconfig.
	kubeconfig string
	creds      string
	tlsCA      string
	tlsCert    string
	tlsKey     string
}

func (o *natsOptions) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.url, "nats-url", envOr("NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL (env NATS_URL)")
	cmd.Flags().StringVar(&o.user, "nats-user", envOr("NATS_USER", "viewer"), "NATS user, read-only viewer by default (env NATS_USER)")
	cmd.Flags().StringVar(&o.passwordFile, "nats-password-file", os.Getenv("MOLT_NATS_PASSWORD_FILE"),
		"file holding the user's password (env MOLT_NATS_PASSWORD_FILE; default: env NATS_PASSWORD, else nats-auth/<user>.password beside the kubeconfig, else .molt/nats-auth/<user>.password in the current directory, as make up writes them)")
	cmd.Flags().StringVar(&o.creds, "nats-creds", "", "NATS credentials file, instead of --nats-user and a password")
	cmd.Flags().StringVar(&o.tlsCA, "nats-tls-ca", os.Getenv("NATS_CA"), "PEM file of the CA that signs the NATS server's certificate; set, TLS is required (env NATS_CA)")
	cmd.Flags().StringVar(&o.tlsCert, "nats-tls-cert", os.Getenv("NATS_CERT"), "PEM client certificate for a NATS server that verifies its clients, with --nats-tls-key (env NATS_CERT)")
	cmd.Flags().StringVar(&o.tlsKey, "nats-tls-key", os.Getenv("NATS_KEY"), "PEM key of --nats-tls-cert (env NATS_KEY)")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// connect logs in as o says. viewer may subscribe only to molt.> and the
// default _INBOX.> (deploy/nats/auth.conf), so the default inbox is kept.
func (o natsOptions) connect() (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("kubectl-molt"), nats.Timeout(5 * time.Second)}
	noPassword := false
	from := "no password" // where the login's secret came from
	switch {
	case o.creds != "":
		opts = append(opts, nats.UserCredentials(o.creds))
		from = "the credentials of --nats-creds " + o.creds
	case o.user != "":
		pw, source, err := o.password()
		if source != "" {
			from = "the password from " + source
		}
		if err != nil {
			return nil, err
		}
		if pw != "" {
			opts = append(opts, nats.UserInfo(o.user, pw))
		}
		noPassword = pw == ""
	}
	if err := o.tls().Validate(); err != nil {
		return nil, err
	}
	secure, err := o.tls().Options()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(o.url, append(opts, secure...)...)
	if err != nil {
		hint := "is molt's NATS running there? (flag --nats-url)"
		switch {
		case (errors.Is(err, nats.ErrAuthorization) || strings.Contains(err.Error(), "Authorization")) && noPassword:
			hint = fmt.Sprintf("NATS refused the login, and no password was sent: none of --nats-password-file, $NATS_PASSWORD or the local stack's files (%s) gave one; pass one of them, or --nats-creds",
				strings.Join(o.localPasswordFiles(), ", "))
		case errors.Is(err, nats.ErrAuthorization) || strings.Contains(err.Error(), "Authorization"):
			hint = fmt.Sprintf("NATS refused the login with %s: check --nats-user and --nats-password-file (or --nats-creds)", from)
		case service.IsTLSError(err):
			hint = "TLS failed: check --nats-tls-ca (the CA of the server's certificate, which must name the host of --nats-url), and --nats-tls-cert and --nats-tls-key if the server verifies its clients"
		}
		return nil, fmt.Errorf("connect to NATS at %s as %q: %w; %s", redact(o.url), o.user, err, hint)
	}
	return nc, nil
}

// tls is how history checks the server's certificate, as a service does.
func (o natsOptions) tls() service.NATSTLS {
	return service.NATSTLS{CAFile: o.tlsCA, CertFile: o.tlsCert, KeyFile: o.tlsKey}
}

// password is the user's password: --nats-password-file, else $NATS_PASSWORD,
// else the first local stack's file that exists, else none. source says
// which, for a refused login (a local stack's file may be another stack's).
func (o natsOptions) password() (pw, source string, err error) {
	file := o.passwordFile
	source = "--nats-password-file " + file
	if file == "" {
		if pw := os.Getenv("NATS_PASSWORD"); pw != "" {
			return pw, "$NATS_PASSWORD", nil
		}
		for _, local := range o.localPasswordFiles() {
			if _, err := os.Stat(local); err == nil {
				file = local
				break
			}
		}
		if file == "" {
			return "", "", nil
		}
		source = "the local stack's file " + file + " (pass --nats-password-file if that stack is not the one at --nats-url)"
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", "", fmt.Errorf("read the NATS password of %q (flag --nats-password-file): %w", o.user, err)
	}
	return strings.TrimRight(string(b), "\r\n"), source, nil
}

// redact hides any user information in a URL.
func redact(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "redacted@" + u[i+1:]
		}
	}
	return u
}

// localPasswordFiles are where `make up` leaves the user's password, in the
// order they are tried: beside each kubeconfig (make up's is
// .molt/kubeconfig, next to .molt/nats-auth), so that the stack kubectl
// talks to is the one logged in to from any directory; then the current
// directory's .molt, for a shell at the repository's root.
func (o natsOptions) localPasswordFiles() []string {
	kubeconfigs := filepath.SplitList(os.Getenv("KUBECONFIG"))
	if o.kubeconfig != "" {
		kubeconfigs = []string{o.kubeconfig}
	}
	var files []string
	seen := map[string]bool{}
	add := func(f string) {
		if abs, err := filepath.Abs(f); err == nil {
			f = abs
		}
		if !seen[f] {
			seen[f] = true
			files = append(files, f)
		}
	}
	for _, k := range kubeconfigs {
		if k != "" {
			add(filepath.Join(filepath.Dir(k), "nats-auth", o.user+".password"))
		}
	}
	add(filepath.Join(".molt", "nats-auth", o.user+".password"))
	return files
}
