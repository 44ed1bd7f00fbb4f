package events

import (
	"strings"
	"testing"
	"unicode"
)

func TestEncodeToken(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain name", "sandbox-1", "sandbox-1"},
		{"dots", "my.sandbox.v2", "my%2Esandbox%2Ev2"},
		{"percent", "50%", "50%25"},
		{"already looks escaped", "a%2Eb", "a%252Eb"},
		{"wildcards", "*>", "%2A%3E"},
		{"whitespace", "a b\tc\n", "a%20b%09c%0A"},
		{"underscore and case kept", "A_b", "A_b"},
		{"non-ASCII", "é", "%C3%A9"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EncodeToken(tt.in)
			if got != tt.want {
				t.Fatalf("EncodeToken(%q) = %q, want %q", tt.in, got, tt.want)
			}
			back, err := DecodeToken(got)
			if err != nil || back != tt.in {
				t.Fatalf("DecodeToken(%q) = %q, %v; want %q", got, back, err, tt.in)
			}
		})
	}
}

func TestDecodeTokenRejects(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"bare dot", "a.b"},
		{"bare wildcard", "a*"},
		{"truncated escape", "a%2"},
		{"lone percent", "%"},
		{"lower-case hex", "a%2eb"},
		{"not hex", "a%G1"},
		{"escaped unreserved byte", "%41"},
		{"space", "a b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := DecodeToken(tt.in); err == nil {
				t.Fatalf("DecodeToken(%q) = %q, want error", tt.in, got)
			}
		})
	}
}

func TestSandboxSubjects(t *testing.T) {
	tests := []struct {
		name, ns, sbx, token, wantSubject, wantHistory string
	}{
		{"simple", "team-a", "sbx-1", TokenPatched, "molt.team-a.sbx-1.patched", "molt.team-a.sbx-1.>"},
		{"dotted name", "team-a", "web.v1", TokenPodReady, "molt.team-a.web%2Ev1.pod-ready", "molt.team-a.web%2Ev1.>"},
		{"dotted namespace", "a.b", "c", TokenFailed, "molt.a%2Eb.c.failed", "molt.a%2Eb.c.>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SandboxSubject(tt.ns, tt.sbx, tt.token); got != tt.wantSubject {
				t.Errorf("SandboxSubject = %q, want %q", got, tt.wantSubject)
			}
			if got := SandboxHistorySubject(tt.ns, tt.sbx); got != tt.wantHistory {
				t.Errorf("SandboxHistorySubject = %q, want %q", got, tt.wantHistory)
			}
			ns, name, tok, err := ParseSubject(tt.wantSubject)
			if err != nil || ns != tt.ns || name != tt.sbx || tok != tt.token {
				t.Errorf("ParseSubject(%q) = %q, %q, %q, %v", tt.wantSubject, ns, name, tok, err)
			}
		})
	}
}

func TestParseSubjectRejects(t *testing.T) {
	for _, s := range []string{"", "molt", "molt.a.b", "other.a.b.patched", "molt.a.b.c.d", "molt.a%2.b.patched", "molt..b.patched"} {
		if _, _, _, err := ParseSubject(s); err == nil {
			t.Errorf("ParseSubject(%q): want error", s)
		}
	}
}

// TestTypeTokens checks the type table: versioned reverse-DNS types, unique dot-free tokens.
func TestTypeTokens(t *testing.T) {
	seen := map[string]string{}
	for typ, tok := range typeTokens {
		if !strings.HasPrefix(typ, "dev.molt.sandbox.") || !strings.HasSuffix(typ, ".v1") {
			t.Errorf("type %q: want dev.molt.sandbox.<...>.v1", typ)
		}
		if !validToken(tok) || EncodeToken(tok) != tok {
			t.Errorf("type %q: token %q is not a plain subject token", typ, tok)
		}
		if other, dup := seen[tok]; dup {
			t.Errorf("token %q used by %q and %q", tok, typ, other)
		}
		seen[tok] = typ
	}
	if len(typeTokens) != 10 {
		t.Errorf("have %d types, want 10 (7 and the 3 re-drives)", len(typeTokens))
	}
}

// TestConsumerFilters checks that every consumer filter is a valid subject under molt.> and
// that every event type except progress reaches some stage consumer besides statusagg.
func TestConsumerFilters(t *testing.T) {
	want := map[string][]string{
		ConsumerPatcher:        {"molt.*.*.requested", "molt.*.*.redrive-requested"},
		ConsumerHookRunner:     {"molt.*.*.patched"},
		ConsumerHookRunnerPost: {"molt.*.*.pod-ready", "molt.*.*.redrive-pod-ready"},
		ConsumerPodCycler:      {"molt.*.*.prehook-done", "molt.*.*.redrive-prehook-done"},
		ConsumerStatusAgg:      {"molt.>"},
	}
	for name, filters := range want {
		got := FilterSubjects(name)
		if strings.Join(got, ",") != strings.Join(filters, ",") {
			t.Errorf("FilterSubjects(%s) = %v, want %v", name, got, filters)
		}
	}
	if len(consumerFilters) != len(want) {
		t.Errorf("have %d consumers, want %d", len(consumerFilters), len(want))
	}
	if FilterSubjects("nobody") != nil {
		t.Errorf("FilterSubjects(unknown) should be nil")
	}
}

// validToken reports whether s is one NATS subject token: non-empty, no '.', '*', '>' or
// whitespace/control characters.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) || r > unicode.MaxASCII {
			return false
		}
	}
	return true
}

// FuzzTokenRoundTrip: any string encodes to a valid token (if non-empty) that decodes back to
// it; any token that decodes is the canonical encoding of its result.
func FuzzTokenRoundTrip(f *testing.F) {
	for _, s := range []string{"", "a", "web.v1", "%", "%2E", "a b", "*", ">", "é", "\x00", "...", "%%25", "A_b-c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := EncodeToken(s)
		if s != "" && !validToken(tok) {
			t.Fatalf("EncodeToken(%q) = %q: not a valid subject token", s, tok)
		}
		back, err := DecodeToken(tok)
		if err != nil || back != s {
			t.Fatalf("DecodeToken(EncodeToken(%q)) = %q, %v", s, back, err)
		}
		if d, err := DecodeToken(s); err == nil && EncodeToken(d) != s {
			t.Fatalf("DecodeToken(%q) = %q but EncodeToken of it = %q", s, d, EncodeToken(d))
		}
	})
}
