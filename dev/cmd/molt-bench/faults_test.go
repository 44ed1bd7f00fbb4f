package main

import (
	"os"
	"strings"
	"testing"
)

func TestFaultsOpsHooks(t *testing.T) {
	ops := faultsOps("bench-x-faults", 7)
	pre := ops.Spec.Lifecycle.PreUpgrade.Exec.Command
	post := ops.Spec.Lifecycle.PostUpgrade.Exec.Command
	for _, cmd := range [][]string{pre, post} {
		if len(cmd) != 3 || cmd[0] != "/bin/bash" || cmd[1] != "-c" {
			t.Fatalf("hook command %q, want /bin/bash -c <script>", cmd)
		}
		if !strings.Contains(cmd[2], "$(date +%s.%N)") || strings.Contains(cmd[2], "%!") || strings.Contains(cmd[2], "%%") {
			t.Errorf("hook script %q: the timestamp format is mangled", cmd[2])
		}
	}
	if !strings.Contains(pre[2], "sleep 7;") || !strings.Contains(pre[2], "tar czf") {
		t.Errorf("preUpgrade %q: want a 7s backup", pre[2])
	}
	if !strings.Contains(post[2], "tar xzf") {
		t.Errorf("postUpgrade %q: want the restore", post[2])
	}
	if got := ops.Spec.Lifecycle.PreUpgrade.TimeoutSeconds; got != 67 {
		t.Errorf("preUpgrade timeoutSeconds %d, want 67", got)
	}
	if ops.Spec.Selector.MatchLabels["bench"] != "bench-x-faults" || ops.Spec.UpdateStrategy.MaxUnavailable.String() != "100%" {
		t.Errorf("ops selects %v at %s, want bench=bench-x-faults at 100%%", ops.Spec.Selector.MatchLabels, ops.Spec.UpdateStrategy.MaxUnavailable)
	}
}

func TestFlagValue(t *testing.T) {
	argv := []string{"nats-server", "-js", "-sd", "/state/nats", "-n", "x"}
	if got := flagValue(argv, "-sd"); got != "/state/nats" {
		t.Errorf("flagValue -sd = %q", got)
	}
	if got := flagValue(argv, "-x"); got != "" {
		t.Errorf("flagValue of a missing flag = %q", got)
	}
	if got := flagValue([]string{"a", "-sd"}, "-sd"); got != "" {
		t.Errorf("flagValue of a flag without a value = %q", got)
	}
}

func TestProcImageOfThisProcess(t *testing.T) {
	argv, env, err := procImage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(argv) == 0 || argv[0] != os.Args[0] {
		t.Errorf("argv %q, want to start with %q", argv, os.Args[0])
	}
	if len(env) != len(os.Environ()) {
		t.Errorf("%d environment entries, want %d", len(env), len(os.Environ()))
	}
}

func TestFaultsReportCountsEveryViolation(t *testing.T) {
	r := &faultsReport{cfg: faultsConfig{hookSeconds: 5}, checked: 3}
	if r.broken() != 0 || !strings.Contains(r.markdown(), "every invariant held") {
		t.Fatalf("an empty report is not clean:\n%s", r.markdown())
	}
	r.add(faultInvariants[4], "sb-0001: 2 pods created, want 1")
	r.add(faultInvariants[7], "sb-0002: workspace file \"\"")
	md := r.markdown()
	if r.broken() != 2 || !strings.Contains(md, "**2 violations**") {
		t.Errorf("broken() = %d; report:\n%s", r.broken(), md)
	}
	for _, want := range []string{"| " + faultInvariants[4] + " | 1 |", "| " + faultInvariants[0] + " | 0 |", "- sb-0001: 2 pods created, want 1"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
