package molt

import (
	"strings"
	"testing"
)

// The retry's default name fits the CRD's 63 characters, however long the
// failed ops's name was.
func TestFitNameKeepsTheRetryNameShortEnough(t *testing.T) {
	for _, tc := range []struct{ name, suffix, want string }{
		{"up", "-retry", "up-retry"},
		{strings.Repeat("a", 57), "-retry", strings.Repeat("a", 57) + "-retry"},
		{strings.Repeat("a", 63), "-retry", strings.Repeat("a", 57) + "-retry"},
		{strings.Repeat("a", 56) + "-bbb", "-retry-2", strings.Repeat("a", 55) + "-retry-2"},
	} {
		got := fitName(tc.name, tc.suffix)
		if got != tc.want || len(got) > maxOpsName {
			t.Errorf("fitName(%d chars, %q) = %q (%d), want %q", len(tc.name), tc.suffix, got, len(got), tc.want)
		}
	}
}
