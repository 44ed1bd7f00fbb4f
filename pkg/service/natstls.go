package service

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"

	"github.com/nats-io/nats.go"
)

// NATSTLS is how a service checks the NATS server's certificate and, for a
// server that asks for one, shows its own. A CA file, a client certificate
// or a tls:// URL makes TLS required: a server that offers none is refused.
// The images are FROM scratch and hold no system CAs, so a tls:// URL needs
// CAFile too. The files are read again at every connect and reconnect (by
// nats.go), so a renewed certificate needs no restart.
type NATSTLS struct {
	// CAFile holds the PEM certificates of the CAs that sign the server's
	// certificate (a mounted Secret's ca.crt).
	CAFile string
	// CertFile and KeyFile are the service's own certificate and key, both
	// or neither, for a server that verifies its clients.
	CertFile string
	KeyFile  string
}

// Validate reports a combination that cannot work, naming the flags.
func (t NATSTLS) Validate() error {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return fmt.Errorf("flag --nats-tls-cert=%s: needs --nats-tls-key", t.CertFile)
	case t.KeyFile != "" && t.CertFile == "":
		return fmt.Errorf("flag --nats-tls-key=%s: needs --nats-tls-cert", t.KeyFile)
	}
	return nil
}

// Options are the nats.go options that make the connection use TLS as t
// says; none when t is empty (a tls:// URL alone still makes nats.go use
// TLS, with the system's CAs). A file that cannot be read or parsed fails
// here, naming the flag, the file and why, rather than as a connect error
// of --nats-url.
func (t NATSTLS) Options() ([]nats.Option, error) {
	var opts []nats.Option
	if t.CAFile != "" {
		opt := nats.RootCAs(t.CAFile)
		if err := opt(&nats.Options{}); err != nil {
			return nil, fmt.Errorf("load NATS TLS CA %s (flag --nats-tls-ca): %w", t.CAFile, err)
		}
		opts = append(opts, opt)
	}
	if t.CertFile != "" {
		opt := nats.ClientCert(t.CertFile, t.KeyFile)
		if err := opt(&nats.Options{}); err != nil {
			return nil, fmt.Errorf("load NATS TLS client certificate %s and key %s (flags --nats-tls-cert, --nats-tls-key): %w", t.CertFile, t.KeyFile, err)
		}
		opts = append(opts, opt)
	}
	return opts, nil
}

// hint is what to check after err, a TLS error (isTLSError), on connecting.
func (t NATSTLS) hint(err error) string {
	switch {
	case errors.Is(err, nats.ErrSecureConnWanted):
		return "the NATS server at the flag --nats-url (env MOLT_NATS_URL) offers no TLS, which --nats-tls-ca, --nats-tls-cert or a tls:// URL require: " +
			"turn TLS on in the server (deploy/components/nats-tls) or leave them out"
	case !isVerifyError(err):
		return fmt.Sprintf("the NATS server refused the TLS handshake or closed the connection right after it: if it verifies its clients, "+
			"set the flags --nats-tls-cert and --nats-tls-key (env MOLT_NATS_TLS_CERT, MOLT_NATS_TLS_KEY; now %q, %q) to a certificate its CA signed", t.CertFile, t.KeyFile)
	case t.CAFile == "":
		return "set the flag --nats-tls-ca (env MOLT_NATS_TLS_CA) to the CA that signs the NATS server's certificate: " +
			"without it only the system's CAs are trusted, and a FROM-scratch image has none"
	}
	return fmt.Sprintf("check that %s (flag --nats-tls-ca, env MOLT_NATS_TLS_CA) holds the CA that signs the NATS server's certificate, "+
		"and that the certificate names the host of the flag --nats-url (env MOLT_NATS_URL)", t.CAFile)
}

// IsTLSError reports whether err is a failed TLS handshake or a TLS
// mismatch between a NATS client and the server.
func IsTLSError(err error) bool {
	var record tls.RecordHeaderError
	return errors.Is(err, nats.ErrTLS) || errors.Is(err, nats.ErrSecureConnWanted) || errors.As(err, &record) || isVerifyError(err) || isTLSAlert(err)
}

// isTLSAlert reports whether err is a TLS alert the server sent, such as
// "remote error: tls: certificate required": with TLS 1.3 a server that
// wants a client certificate says so after the handshake, on the first
// read, and the error carries no nats.ErrTLS.
func isTLSAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// isVerifyError reports whether err says the server's certificate did not
// verify.
func isVerifyError(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid)
}
