package patcher

import "testing"

func TestConfigNamesTheFlag(t *testing.T) {
	c := Config{Workers: 0}
	if err := c.Validate(); err == nil || err.Error() != "flag --workers=0: must be at least 1" {
		t.Fatalf("Validate = %v", err)
	}
}
