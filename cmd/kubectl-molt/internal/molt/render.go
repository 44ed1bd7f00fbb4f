package molt

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"molt.dev/pkg/upgrade"
)

const (
	ansiRed   = "\x1b[31m"
	ansiGreen = "\x1b[32m"
	ansiBold  = "\x1b[1m"
	ansiReset = "\x1b[0m"
	// ansiHomeClear moves the cursor home and clears the screen: the
	// terminal view redraws in place.
	ansiHomeClear  = "\x1b[H\x1b[2J"
	ansiHideCursor = "\x1b[?25l"
	ansiShowCursor = "\x1b[?25h"
)

// fitScreen cuts a screen to height rows (0: as it is), saying how many
// lines did not fit, so a redraw never scrolls the terminal.
func fitScreen(screen string, height int) string {
	lines := strings.Split(strings.TrimRight(screen, "\n"), "\n")
	if height <= 1 || len(lines) < height {
		return screen
	}
	keep := height - 2
	return strings.Join(lines[:keep], "\n") + fmt.Sprintf("\n… %d more lines: enlarge the terminal, or use -o json\n", len(lines)-keep)
}

// paint wraps s in an ANSI colour when color is on.
func paint(color bool, code, s string) string {
	if !color || s == "" {
		return s
	}
	return code + s + ansiReset
}

// bar is a progress bar of width cells: updated cells green, failed red,
// the rest light.
func bar(s Summary, width int, color bool) string {
	if s.Total <= 0 {
		return "[" + strings.Repeat("░", width) + "]"
	}
	up := int(math.Floor(float64(s.Updated) / float64(s.Total) * float64(width)))
	failed := int(math.Ceil(float64(s.Failed) / float64(s.Total) * float64(width)))
	if up+failed > width {
		failed = width - up
	}
	rest := width - up - failed
	return "[" + paint(color, ansiGreen, strings.Repeat("█", up)) + paint(color, ansiRed, strings.Repeat("█", failed)) + strings.Repeat("░", rest) + "]"
}

// duration prints seconds as kubectl prints ages: 45s, 3m20s, 1h5m.
func duration(seconds float64) string {
	d := time.Duration(seconds) * time.Second
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

func eta(s Summary) string {
	if s.ETASeconds == nil {
		return "-"
	}
	return duration(*s.ETASeconds)
}

// counts is the one-line count of where the sandboxes stand.
func counts(s Summary, color bool) string {
	failed := fmt.Sprintf("%d failed", s.Failed)
	if s.Failed > 0 {
		failed = paint(color, ansiRed, failed)
	}
	line := fmt.Sprintf("%d/%d updated, %s, %d updating, %d not started", s.Updated, s.Total, failed, s.Updating, s.NotStarted)
	if s.Released > 0 {
		line += fmt.Sprintf(", %d ended and released since the delete", s.Released)
	}
	return line
}

// stages is "PreUpgrade 2, UpgradePod 3, PostUpgrade 0".
func stages(s Summary) string {
	var parts []string
	for _, c := range s.Stages {
		parts = append(parts, fmt.Sprintf("%s %d", c.Stage, c.Count))
	}
	return strings.Join(parts, ", ")
}

// renderScreen is the terminal view: redrawn in place at every poll.
func renderScreen(s Summary, color bool) string {
	var b strings.Builder
	phase := s.Phase
	switch phase {
	case "Failed":
		phase = paint(color, ansiRed+ansiBold, phase)
	case "Completed":
		phase = paint(color, ansiGreen+ansiBold, phase)
	}
	fmt.Fprintf(&b, "SandboxUpdateOps %s/%s  %s%s  elapsed %s\n", s.Namespace, s.Name, phase, note(s), duration(s.ElapsedSeconds))
	if s.Stale != "" {
		fmt.Fprintf(&b, "%s\n", paint(color, ansiRed, "warning: "+s.Stale))
	}
	fmt.Fprintf(&b, "%s %s\n", bar(s, 40, color), counts(s, color))
	fmt.Fprintf(&b, "%s\n\n", pace(s, "throughput %.1f/min  ETA %s"))

	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tSANDBOXES")
	for _, c := range s.Stages {
		fmt.Fprintf(tw, "%s\t%d\n", c.Stage, c.Count)
	}
	_ = tw.Flush()

	if len(s.InFlight) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		waits := slices.ContainsFunc(s.InFlight, func(f InFlight) bool { return f.WaitingFor != "" })
		header := "SLOWEST IN FLIGHT\tSTAGE\tIN STAGE FOR"
		if waits {
			header += "\tWAITING FOR"
		}
		fmt.Fprintln(tw, header)
		for _, f := range s.InFlight {
			age := duration(f.AgeSeconds)
			if f.Stage == stageAdmitted {
				age = "-" // its status does not show the attempt yet
			}
			if waits {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Name, f.Stage, age, f.WaitingFor)
			} else {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, f.Stage, age)
			}
		}
		_ = tw.Flush()
	}
	if len(s.FailedSandboxes) > 0 {
		b.WriteString("\n")
		b.WriteString(paint(color, ansiRed, "FAILED") + "\n")
		for _, f := range s.FailedSandboxes {
			b.WriteString(failedLine(f, color))
		}
	}
	for _, c := range s.Conditions {
		fmt.Fprintf(&b, "\n%s: %s\n", c.Type, c.Message)
	}
	return b.String()
}

// failedLine is one failed sandbox: name, reason, stderr tail, message.
func failedLine(f FailedSandbox, color bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %s  %s", f.Name, paint(color, ansiRed, f.Reason))
	if f.Stderr != "" {
		fmt.Fprintf(&b, "  stderr: %s", tailLines(f.Stderr, 3))
	}
	b.WriteString("\n")
	if f.Message != "" {
		fmt.Fprintf(&b, "    %s\n", truncate(f.Message, 300))
	}
	return b.String()
}

// tailLines keeps the last n lines of s, joined with " | ".
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// plainLine is the line printed without a terminal, once per change.
func plainLine(s Summary) string {
	phase := s.Phase + note(s)
	return fmt.Sprintf("%s/%s %s: %s; %s", s.Namespace, s.Name, phase, counts(s, false), stages(s))
}

// plainExtra is what follows plainLine: throughput and ETA (not part of
// what makes a line change).
func plainExtra(s Summary) string {
	return "; " + pace(s, "%.1f/min, ETA %s")
}

// pace is the throughput and ETA of an ops in progress, in format; for one
// that has ended, how long it took (and its throughput, if it updated any:
// 0.0/min would read as a stall).
func pace(s Summary, format string) string {
	if !s.Finished() {
		return fmt.Sprintf(format, s.PerMinute, eta(s))
	}
	if s.Updated == 0 {
		return "ended after " + duration(s.ElapsedSeconds)
	}
	return fmt.Sprintf("ended after %s, %.1f/min", duration(s.ElapsedSeconds), s.PerMinute)
}

// note says why an unfinished ops admits no new sandbox ("" when it does).
func note(s Summary) string {
	switch {
	case s.Finished():
		return ""
	case s.Deleting && s.Updating == 0:
		return " (being deleted: no sandbox is in a stage; the selector takes its label off the sandboxes, then its finalizer off the ops: if it stays, its Deleting condition says what waits, and is the selector running?)"
	case s.Deleting:
		return fmt.Sprintf(" (being deleted: waiting for %s in a stage to end %s attempt; nothing more is started)", upgrade.Sandboxes(s.Updating), upgrade.Agree(s.Updating, "its", "their"))
	case s.Paused:
		return " (paused: no new sandbox is admitted)"
	}
	return ""
}
