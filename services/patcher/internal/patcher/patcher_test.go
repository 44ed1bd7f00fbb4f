package patcher

import "testing"

func TestPastPatching(t *testing.T) {
	cases := []struct {
		reason string
		want   bool
	}{
		{"PreUpgrade", false},
		{"PreUpgradeFailed", false},
		{"UpgradePod", true},
		{"UpgradePodFailed", false},
		{"PostUpgrade", true},
		{"PostUpgradeFailed", true},
		{"Succeeded", true},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			if got := pastPatching(tc.reason); got != tc.want {
				t.Fatalf("pastPatching(%s) = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}

func TestConfigNamesTheFlag(t *testing.T) {
	c := Config{Workers: 0}
	if err := c.Validate(); err == nil || err.Error() != "flag --workers=0: must be at least 1" {
		t.Fatalf("Validate = %v", err)
	}
}
