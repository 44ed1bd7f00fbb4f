package events

import (
	"fmt"
	"strings"
)

// Stream and subject layout.
const (
	// StreamName is the one JetStream stream that holds every molt event. Created by
	// EnsureStream at start-up of every service; read by every durable consumer below and by
	// operators (`nats stream view MOLT_EVENTS`).
	StreamName = "MOLT_EVENTS"

	// SubjectPrefix is the first token of every molt subject:
	// molt.<namespace>.<sandbox>.<event token>. Producers: every service through Publisher.
	SubjectPrefix = "molt"

	// StreamSubjects is the subject filter of StreamName: everything under SubjectPrefix.
	StreamSubjects = SubjectPrefix + ".>"
)

// SandboxSubject returns molt.<namespace>.<name>.<eventToken>, with namespace and name escaped
// by EncodeToken. eventToken is one of the Token constants (already a valid token).
// namespace and name must not be empty; Publisher checks that before it calls this.
func SandboxSubject(namespace, name, eventToken string) string {
	return SubjectPrefix + "." + EncodeToken(namespace) + "." + EncodeToken(name) + "." + eventToken
}

// SandboxHistorySubject returns molt.<namespace>.<name>.>, the filter that selects one
// sandbox's whole history:
//
//	nats stream view MOLT_EVENTS --subject "$(SandboxHistorySubject ns name)"
func SandboxHistorySubject(namespace, name string) string {
	return SubjectPrefix + "." + EncodeToken(namespace) + "." + EncodeToken(name) + ".>"
}

// ParseSubject splits a sandbox subject built by SandboxSubject back into the decoded
// namespace, the decoded name and the event token.
func ParseSubject(subject string) (namespace, name, eventToken string, err error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 || parts[0] != SubjectPrefix {
		return "", "", "", fmt.Errorf("parse subject %q: want %s.<namespace>.<name>.<event>", subject, SubjectPrefix)
	}
	if namespace, err = DecodeToken(parts[1]); err != nil {
		return "", "", "", fmt.Errorf("parse subject %q: namespace: %w", subject, err)
	}
	if name, err = DecodeToken(parts[2]); err != nil {
		return "", "", "", fmt.Errorf("parse subject %q: name: %w", subject, err)
	}
	if namespace == "" || name == "" || parts[3] == "" {
		return "", "", "", fmt.Errorf("parse subject %q: empty token", subject)
	}
	return namespace, name, parts[3], nil
}

// unreserved reports whether b is left as is by EncodeToken. Kubernetes names use only
// [a-z0-9.-], so in practice only '.' is ever escaped and subjects stay readable.
func unreserved(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_'
}

const upperHex = "0123456789ABCDEF"

// EncodeToken escapes s so that it is a single NATS subject token: every byte outside
// [A-Za-z0-9_-] — so '.', '*', '>', '%', whitespace, control and non-ASCII bytes — becomes %XX
// with upper-case hex ('.' → %2E, '%' → %25). '%' itself is legal in NATS subjects. The
// encoding is reversible (DecodeToken) and canonical: one string has exactly one encoding.
// The empty string encodes to the empty string, which is not a valid token; callers must
// not build subjects from empty names.
func EncodeToken(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !unreserved(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0x0F])
	}
	return b.String()
}

// DecodeToken reverses EncodeToken. It accepts only canonical encodings (upper-case hex, no
// escaped unreserved byte, no bare reserved byte), so DecodeToken(t) succeeds exactly when
// EncodeToken of its result is t.
func DecodeToken(token string) (string, error) {
	if !strings.Contains(token, "%") {
		for i := 0; i < len(token); i++ {
			if !unreserved(token[i]) {
				return "", fmt.Errorf("decode token %q: byte %q at %d must be escaped", token, token[i], i)
			}
		}
		return token, nil
	}
	var b strings.Builder
	b.Grow(len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		if c != '%' {
			if !unreserved(c) {
				return "", fmt.Errorf("decode token %q: byte %q at %d must be escaped", token, c, i)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(token) {
			return "", fmt.Errorf("decode token %q: truncated escape at %d", token, i)
		}
		hi, lo := unhex(token[i+1]), unhex(token[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("decode token %q: invalid escape %q at %d", token, token[i:i+3], i)
		}
		d := byte(hi<<4 | lo)
		if unreserved(d) {
			return "", fmt.Errorf("decode token %q: %q escapes unreserved byte %q", token, token[i:i+3], d)
		}
		b.WriteByte(d)
		i += 2
	}
	return b.String(), nil
}

// unhex returns the value of an upper-case hex digit, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
