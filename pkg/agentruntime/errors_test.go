package agentruntime

import "testing"

// TestHookOutputReadsFailureMessage: what FailureMessage writes, HookOutput
// reads back.
func TestHookOutputReadsFailureMessage(t *testing.T) {
	for _, tc := range []struct {
		name           string
		res            Result
		stderr, stdout string
	}{
		{"both", Result{Exited: true, ExitCode: 3, Stderr: "disk full\n", Stdout: "copying"}, "disk full", "copying"},
		{"no stderr", Result{Exited: true, ExitCode: 1, Stdout: "x"}, "", "x"},
		{"commas inside", Result{Exited: true, ExitCode: 2, Stderr: "a, b, stdout: c", Stdout: ""}, "a, b, stdout: c", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stderr, stdout, ok := HookOutput(tc.res.FailureMessage())
			if !ok || stderr != tc.stderr || stdout != tc.stdout {
				t.Fatalf("HookOutput(%q) = %q, %q, %v", tc.res.FailureMessage(), stderr, stdout, ok)
			}
		})
	}
	if _, _, ok := HookOutput("pod x not Ready after 5m0s"); ok {
		t.Fatal("HookOutput read a message that is not a hook's")
	}
}
