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

// A retry of a retry counts on rather than growing -retry-retry, and skips
// the names taken.
func TestRetryNameCountsOn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		taken []string
		want  string
	}{
		{"up", nil, "up-retry"},
		{"up", []string{"up", "up-retry"}, "up-retry-2"},
		{"up-retry", []string{"up-retry"}, "up-retry-2"},
		{"up-retry", []string{"up-retry", "up-retry-2"}, "up-retry-3"},
		{"up-retry-2", []string{"up-retry-2"}, "up-retry-3"},
		{"up-retry-9", nil, "up-retry-10"},
		{"up-retry-1", nil, "up-retry-2"},
		{"up-retrying", nil, "up-retrying-retry"},
		{strings.Repeat("a", 57) + "-retry", nil, strings.Repeat("a", 55) + "-retry-2"},
	} {
		if got := retryName(tc.name, tc.taken); got != tc.want || len(got) > maxOpsName {
			t.Errorf("retryName(%q, %v) = %q, want %q", tc.name, tc.taken, got, tc.want)
		}
	}
}
