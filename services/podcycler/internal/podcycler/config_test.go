package podcycler

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

func TestConfigFlags(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			if c.Workers != DefaultWorkers || c.PodReadyTimeout != DefaultPodReadyTimeout || c.UpgradePodGrace != DefaultUpgradePodGrace {
				t.Errorf("workers=%d timeout=%s grace=%s, want %d %s %s", c.Workers, c.PodReadyTimeout, c.UpgradePodGrace, DefaultWorkers, DefaultPodReadyTimeout, DefaultUpgradePodGrace)
			}
		}},
		{name: "env fallback", env: map[string]string{"MOLT_POD_READY_TIMEOUT": "90s", "MOLT_PODCYCLER_WORKERS": "3"}, check: func(t *testing.T, c Config) {
			if c.Workers != 3 || c.PodReadyTimeout != 90*time.Second {
				t.Errorf("workers=%d timeout=%s, want 3 1m30s", c.Workers, c.PodReadyTimeout)
			}
		}},
		{name: "flag wins over env", env: map[string]string{"MOLT_POD_READY_TIMEOUT": "90s"}, args: []string{"--pod-ready-timeout=2m"}, check: func(t *testing.T, c Config) {
			if c.PodReadyTimeout != 2*time.Minute {
				t.Errorf("timeout=%s, want 2m", c.PodReadyTimeout)
			}
		}},
		{name: "grace from env", env: map[string]string{"MOLT_UPGRADE_POD_GRACE": "3s"}, check: func(t *testing.T, c Config) {
			if c.UpgradePodGrace != 3*time.Second {
				t.Errorf("grace=%s, want 3s", c.UpgradePodGrace)
			}
		}},
		{name: "negative grace", args: []string{"--upgrade-pod-grace=-1s"}, wantErr: "flag --upgrade-pod-grace=-1s"},
		{name: "zero workers", args: []string{"--workers=0"}, wantErr: "flag --workers=0"},
		{name: "negative timeout", args: []string{"--pod-ready-timeout=-1s"}, wantErr: "flag --pod-ready-timeout=-1s"},
		{name: "bad env duration", env: map[string]string{"MOLT_POD_READY_TIMEOUT": "soon"}, wantErr: `env MOLT_POD_READY_TIMEOUT="soon"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"MOLT_POD_READY_TIMEOUT", "MOLT_PODCYCLER_WORKERS", "MOLT_UPGRADE_POD_GRACE"} {
				if v, ok := tt.env[k]; ok {
					t.Setenv(k, v)
				} else {
					unsetenv(t, k)
				}
			}
			var c Config
			fs := flag.NewFlagSet("podcycler", flag.ContinueOnError)
			c.RegisterFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			tt.check(t, c)
		})
	}
}

// unsetenv removes k for the test and restores it afterwards.
func unsetenv(t *testing.T, k string) {
	t.Helper()
	t.Setenv(k, "")
	if err := os.Unsetenv(k); err != nil {
		t.Fatal(err)
	}
}
