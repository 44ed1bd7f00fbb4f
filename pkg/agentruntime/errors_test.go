package agentruntime

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

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
		{"exited 0 with the runtime's error", Result{Exited: true, ExitCode: 0, Error: "signal: out of memory", Stderr: "e", Stdout: "o"}, "e", "o"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stderr, stdout, ok := HookOutput(tc.res.FailureMessage())
			if !ok || stderr != tc.stderr || stdout != tc.stdout {
				t.Fatalf("HookOutput(%q) = %q, %q, %v", tc.res.FailureMessage(), stderr, stdout, ok)
			}
		})
	}
	if msg := (Result{Exited: true, Error: "signal: out of memory"}).FailureMessage(); !strings.Contains(msg, "out of memory") {
		t.Errorf("FailureMessage of an exit 0 with an error = %q, want the runtime's error in it", msg)
	}
	if _, _, ok := HookOutput("pod x not Ready after 5m0s"); ok {
		t.Fatal("HookOutput read a message that is not a hook's")
	}
}

// HookCause reads back what went wrong with a call (a timeout) before its output,
// which kubectl molt history shows with the output; a hook that exited has none.
func TestHookCause(t *testing.T) {
	msg := ErrorMessageWithOutput(errors.New("timed out after 3 seconds"), Result{Stdout: "starting"})
	if got := HookCause(msg); got != "timed out after 3 seconds" {
		t.Errorf("HookCause(%q) = %q, want the timeout", msg, got)
	}
	if got := HookCause(Result{Exited: true, ExitCode: 3, Stderr: "x"}.FailureMessage()); got != "" {
		t.Errorf("HookCause of an exit code = %q, want none", got)
	}
}

// A hook that prints a lot before it fails keeps the end of each stream,
// where it says why, within the condition message's limit: nothing later
// cuts the message, so its stdout section stays readable too.
func TestFailureMessageKeepsTheEndsWithinTheLimit(t *testing.T) {
	progress := strings.Repeat("tar: adding /home/user/workspace/file\n", 60) // ~2.3 KB
	cause := "tar: /mnt/shared/backup.tgz: No space left on device"
	for _, tc := range []struct {
		name string
		msg  string
	}{
		{"exit code", Result{Exited: true, ExitCode: 2, Stderr: progress + cause + "\n", Stdout: progress + "done 41 of 60"}.FailureMessage()},
		{"call error", ErrorMessageWithOutput(errors.New("timed out after 60 seconds"), Result{Stderr: progress + cause, Stdout: progress + "done 41 of 60"})},
		// Bytes that are not UTF-8 take 3 bytes each once stored: the room
		// is sized on what is kept, so the ends survive.
		{"invalid UTF-8", Result{Exited: true, ExitCode: 7, Stderr: progress + strings.Repeat("\xff\xfe\xfd \xfc\n", 40) + cause + "\n", Stdout: progress + "done 41 of 60"}.FailureMessage()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !utf8.ValidString(tc.msg) {
				t.Errorf("message is not valid UTF-8: the API server stores it otherwise, longer")
			}
			if len(tc.msg) > agentsv1alpha1.MaxConditionMessageLength {
				t.Errorf("message of %d bytes, over the limit %d", len(tc.msg), agentsv1alpha1.MaxConditionMessageLength)
			}
			if agentsv1alpha1.TruncateConditionMessage(tc.msg) != tc.msg {
				t.Errorf("the condition would cut the message")
			}
			stderr, stdout, ok := HookOutput(tc.msg)
			if !ok {
				t.Fatalf("HookOutput(%q) not ok", tc.msg)
			}
			if !strings.HasSuffix(stderr, cause) || !strings.HasPrefix(stderr, "…") {
				t.Errorf("stderr tail %q: want it cut at the front and ending in the cause", stderr)
			}
			if !strings.HasSuffix(stdout, "done 41 of 60") {
				t.Errorf("stdout tail %q: want its last line", stdout)
			}
			if len(stderr) < 3*len(stdout) {
				t.Errorf("stderr tail %d bytes, stdout %d: want stderr to get most of the room", len(stderr), len(stdout))
			}
		})
	}
	short := Result{Exited: true, ExitCode: 1, Stderr: "é" + strings.Repeat("x", 2000)}.FailureMessage()
	if !strings.HasPrefix(short, "hook failed with exit code 1, stderr: …x") {
		t.Errorf("a stream cut mid-way starts with the mark: %q", short[:60])
	}
}

// A long cause (an agent-runtime's own error text) still leaves the labels
// and the output's ends within the limit.
func TestErrorMessageWithOutputOfALongCause(t *testing.T) {
	msg := ErrorMessageWithOutput(errors.New(strings.Repeat("proxy said no; ", 100)), Result{Stderr: "the cause", Stdout: "the last step"})
	if len(msg) > agentsv1alpha1.MaxConditionMessageLength {
		t.Fatalf("message of %d bytes, over %d", len(msg), agentsv1alpha1.MaxConditionMessageLength)
	}
	if stderr, stdout, ok := HookOutput(msg); !ok || stderr != "the cause" || stdout != "the last step" {
		t.Errorf("HookOutput = %q, %q, %v", stderr, stdout, ok)
	}
	if _, _, ok := HookOutput(ErrorMessage(errors.New("timed out after 60 seconds"))); ok {
		t.Error("HookOutput read output from an error message without any")
	}
}

// A hook that exits 0 with stderr is noted (its stderr tail, within half a
// condition's message); one with no stderr, or that failed, is not.
func TestSuccessNote(t *testing.T) {
	ok := Result{Exited: true, Stderr: "tar: /mnt/shared: Cannot open: No such file or directory\n"}
	if got := ok.SuccessNote("preUpgrade"); !strings.HasPrefix(got, "preUpgrade exited 0 but wrote to stderr") || !strings.HasSuffix(got, "No such file or directory") {
		t.Errorf("SuccessNote = %q", got)
	}
	long := Result{Exited: true, Stderr: strings.Repeat("x", 5000) + "the end"}
	if got := long.SuccessNote("postUpgrade"); len(got) > agentsv1alpha1.MaxConditionMessageLength/2 || !strings.HasSuffix(got, "the end") {
		t.Errorf("SuccessNote of a long stderr: %d bytes, ends %q", len(got), got[max(0, len(got)-10):])
	}
	for _, r := range []Result{{Exited: true}, {Exited: true, Stderr: "  \n"}, {Exited: true, ExitCode: 2, Stderr: "boom"}} {
		if got := r.SuccessNote("preUpgrade"); got != "" {
			t.Errorf("SuccessNote(%+v) = %q, want none", r, got)
		}
	}
}

// TestHookExited: only a hook that ran and exited non-zero is one; a hook
// the agent-runtime could not run, or a message not a hook's, is not.
func TestHookExited(t *testing.T) {
	if msg := (Result{Exited: true, ExitCode: 2, Stderr: "tar: /mnt/shared: Cannot open"}).FailureMessage(); !HookExited(msg) {
		t.Errorf("HookExited(%q) = false, want true", msg)
	}
	for _, msg := range []string{
		ErrorMessageWithOutput(errors.New("connection refused"), Result{}),
		"pod x not Ready after 5m0s",
	} {
		if HookExited(msg) {
			t.Errorf("HookExited(%q) = true, want false", msg)
		}
	}
}
