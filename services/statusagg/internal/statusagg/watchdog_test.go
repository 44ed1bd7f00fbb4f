package statusagg

import (
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const d = 10 * time.Second
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name string
		now  time.Time
		done drives
		want int
	}{
		{"within the deadline", at(9), drives{}, verdictWait},
		{"a deadline after entering: re-drive 1", at(10), drives{}, verdictRedrive},
		{"a deadline after re-drive 1: re-drive 2", at(20), drives{n: 1, last: at(10)}, verdictRedrive},
		{"within the deadline of re-drive 1", at(19), drives{n: 1, last: at(10)}, verdictWait},
		{"a deadline after the last re-drive: fail", at(30), drives{n: 2, last: at(20)}, verdictFail},
		{"within the deadline of the last re-drive", at(29), drives{n: 2, last: at(20)}, verdictWait},
		// A new leader, a restarted or a resumed statusagg finds a stage entered many
		// deadlines ago that it never re-drove: the old leader may hold its input. It
		// re-drives first and never fails it at once.
		{"entered long ago, never re-driven here: re-drive, not fail", at(100), drives{}, verdictRedrive},
		{"entered long ago, re-driven once here just now", at(101), drives{n: 1, last: at(100)}, verdictWait},
		{"entered long ago, re-driven twice here, a deadline ago", at(120), drives{n: 2, last: at(110)}, verdictFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judge(tc.now, t0, d, tc.done, 2); got != tc.want {
				t.Fatalf("judge = %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("no re-drives allowed: fail a deadline after entering", func(t *testing.T) {
		if got := judge(at(10), t0, d, drives{}, 0); got != verdictFail {
			t.Fatalf("judge = %d, want fail", got)
		}
	})
}
