package selector

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/service"
	"molt.dev/pkg/upgrade"
)

func TestCountInflight(t *testing.T) {
	sb := func(name string) *agentsv1alpha1.Sandbox {
		return &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	base := upgrade.Selection{
		Candidates: []upgrade.Candidate{
			{Sandbox: sb("a"), State: upgrade.Updated},
			{Sandbox: sb("b"), State: upgrade.NotStarted},
			{Sandbox: sb("c"), State: upgrade.NotStarted},
			{Sandbox: sb("d"), State: upgrade.NotStarted},
		},
		Updated: 1, NotStarted: 3, MaxUnavailable: 2,
	}
	cases := []struct {
		name         string
		unseen       map[string]bool
		wantUpdating int
		wantAdmit    []string
	}{
		{name: "cache up to date", unseen: nil, wantUpdating: 0, wantAdmit: []string{"b", "c"}},
		{name: "one admission not in the cache yet", unseen: map[string]bool{"b": true}, wantUpdating: 1, wantAdmit: []string{"c"}},
		{name: "budget used by unseen admissions", unseen: map[string]bool{"b": true, "c": true}, wantUpdating: 2, wantAdmit: nil},
		{name: "an updated sandbox is not recounted", unseen: map[string]bool{"a": true}, wantUpdating: 0, wantAdmit: []string{"b", "c"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := countInflight(base, func(c upgrade.Candidate) bool { return tc.unseen[c.Sandbox.Name] })
			if got.Updating != tc.wantUpdating || got.NotStarted != 3-tc.wantUpdating {
				t.Errorf("updating %d, not started %d; want %d, %d", got.Updating, got.NotStarted, tc.wantUpdating, 3-tc.wantUpdating)
			}
			var admit []string
			for _, c := range got.ToAdmit() {
				admit = append(admit, c.Sandbox.Name)
			}
			if !slices.Equal(admit, tc.wantAdmit) {
				t.Errorf("to admit %v, want %v", admit, tc.wantAdmit)
			}
			if base.Candidates[1].State != upgrade.NotStarted {
				t.Fatal("countInflight changed its input")
			}
		})
	}
}

func TestInflightUnseenUntilTheCacheMoves(t *testing.T) {
	f := newInflight()
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "u1", ResourceVersion: "10"}}
	if f.unseen(sb, "att") {
		t.Fatal("unseen before admission")
	}
	f.admitted(sb, "att")
	if !f.unseen(sb, "att") {
		t.Error("not unseen while the cache still shows the version read")
	}
	if f.unseen(sb, "other") {
		t.Error("unseen for another attempt")
	}
	moved := sb.DeepCopy()
	moved.ResourceVersion = "11"
	if f.unseen(moved, "att") {
		t.Error("unseen after the cache moved on")
	}
	f.forgetAttempt("att")
	if f.unseen(sb, "att") {
		t.Error("unseen after forgetAttempt")
	}
}

func TestConfigValidateNamesTheFlag(t *testing.T) {
	valid := func() Config {
		c := Config{LeaderElection: service.LeaderElection{Enabled: true, Namespace: "kube-system", LeaseName: LeaseName}, Workers: 1, RepublishAfter: DefaultRepublishAfter}
		c.Options.Name, c.Options.NATSURL, c.Options.HTTPAddr = "selector", "nats://x", ":0"
		c.Options.KubeQPS, c.Options.KubeBurst, c.Options.ShutdownTimeout = 1, 1, 1
		return c
	}
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{name: "valid", mutate: func(*Config) {}, want: ""},
		{name: "no workers", mutate: func(c *Config) { c.Workers = 0 }, want: "--workers"},
		{name: "no republish interval", mutate: func(c *Config) { c.RepublishAfter = 0 }, want: "--republish-after"},
		{name: "no lease namespace", mutate: func(c *Config) { c.LeaderElection.Namespace = "" }, want: "--leader-election-namespace"},
		{name: "no lease namespace without election", mutate: func(c *Config) { c.LeaderElection.Namespace, c.LeaderElection.Enabled = "", false }, want: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}
