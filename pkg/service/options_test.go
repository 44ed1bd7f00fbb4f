package service_test

import (
	"flag"
	"strings"
	"testing"
	"time"

	"molt.dev/pkg/events"
	"molt.dev/pkg/service"
)

// TestDuplicateWindowFlag: --duplicate-window (env MOLT_DUPLICATE_WINDOW)
// sets the stream config a service creates the stream with; the flag wins
// over the variable, and a value that cannot work names the flag or the
// variable.
func TestDuplicateWindowFlag(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     string // MOLT_DUPLICATE_WINDOW; "-" leaves it unset
		args    []string
		want    time.Duration
		wantErr string
	}{
		{name: "default", env: "-", want: events.DefaultDuplicates},
		{name: "from the environment", env: "10s", want: 10 * time.Second},
		{name: "flag wins", env: "10s", args: []string{"--duplicate-window=30s"}, want: 30 * time.Second},
		{name: "variable that is no duration", env: "ten", wantErr: "MOLT_DUPLICATE_WINDOW"},
		{name: "negative flag", env: "-", args: []string{"--duplicate-window=-1s"}, wantErr: "--duplicate-window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "-" {
				t.Setenv("MOLT_DUPLICATE_WINDOW", tc.env)
			}
			var o service.Options
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			o.RegisterFlags(fs, "x", "127.0.0.1:0")
			if err := fs.Parse(append([]string{"--nats-url=nats://x"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate() = %v, want an error naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if o.Stream.Duplicates != tc.want {
				t.Fatalf("Stream.Duplicates = %s, want %s", o.Stream.Duplicates, tc.want)
			}
		})
	}
}
