package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current encoder")

func exitCode(c int32) *int32 { return &c }

// sampleEvent is a fully populated event with the fields Publisher would fill in.
func sampleEvent(typ string) Event {
	ev := Event{
		Type:   typ,
		Source: ConsumerHookRunner,
		Time:   time.Date(2026, 5, 4, 12, 30, 0, 0, time.UTC),
		Data: Data{
			Ops:     OpsRef{Name: "upgrade-web", UID: "11111111-1111-1111-1111-111111111111"},
			Sandbox: SandboxRef{Namespace: "team-a", Name: "web.v1", UID: "22222222-2222-2222-2222-222222222222"},
			Attempt: "1",
			Stage:   "PreUpgrade",
		},
	}
	// Each type with the fields its producer sets.
	switch typ {
	case TypeFailed:
		ev.Data.Reason = "PreUpgradeFailed"
		ev.Data.Message = "hook failed with exit code 3, stderr: disk full, stdout: "
		ev.Data.HookExitCode = exitCode(3)
		ev.Data.OldPodUID = "33333333-3333-3333-3333-333333333333"
	case TypeRequested:
		ev.Source, ev.Data.Stage = "selector", ""
		ev.Data.ResumedAttempt, ev.Data.ResumedReason = "0", "UpgradePodFailed"
	case TypePatched:
		ev.Source = "patcher"
		ev.Data.TargetRevision = "5d8f7c9b4"
	case TypePreHookDone:
		ev.Data.TargetRevision, ev.Data.HookExitCode = "5d8f7c9b4", exitCode(0)
		ev.Data.OldPodUID = "33333333-3333-3333-3333-333333333333"
	case TypePodReady:
		ev.Source, ev.Data.Stage = "podcycler", "UpgradePod"
		ev.Data.TargetRevision = "5d8f7c9b4"
		ev.Data.OldPodUID, ev.Data.NewPodUID = "33333333-3333-3333-3333-333333333333", "44444444-4444-4444-4444-444444444444"
	case TypePostHookDone:
		ev.Data.Stage, ev.Data.TargetRevision, ev.Data.HookExitCode = "PostUpgrade", "5d8f7c9b4", exitCode(0)
		ev.Data.NewPodUID = "44444444-4444-4444-4444-444444444444"
	case TypeStageStarted:
		ev.Source, ev.Data.Stage = "podcycler", "UpgradePod"
	case TypeRedriveRequested:
		ev.Source, ev.Data.Stage, ev.Data.Redrive = "statusagg", "", 1
	case TypeRedrivePreHookDone:
		ev.Source, ev.Data.Stage, ev.Data.Redrive = "statusagg", "UpgradePod", 1
		ev.Data.TargetRevision, ev.Data.OldPodUID = "5d8f7c9b4", "33333333-3333-3333-3333-333333333333"
	case TypeRedrivePodReady:
		ev.Source, ev.Data.Stage, ev.Data.Redrive = "statusagg", "UpgradePod", 1
		ev.Data.TargetRevision, ev.Data.NewPodUID = "5d8f7c9b4", "44444444-4444-4444-4444-444444444444"
	}
	ev.ID = MessageID(ev)
	return ev
}

// TestEncodeGolden pins the wire format (what `nats stream view` shows) of every event type.
func TestEncodeGolden(t *testing.T) {
	for _, typ := range Types() {
		tok, _ := TokenFor(typ)
		t.Run(tok, func(t *testing.T) {
			body, err := Encode(sampleEvent(typ))
			if err != nil {
				t.Fatal(err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, body, "", "  "); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			path := filepath.Join("testdata", tok+".golden.json")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run: go test ./events/ -run TestEncodeGolden -update)", err)
			}
			if !bytes.Equal(pretty.Bytes(), want) {
				t.Fatalf("encoding of %s changed (rerun with -update if intended):\n%s\nwant:\n%s", typ, pretty.Bytes(), want)
			}
		})
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for typ := range typeTokens {
		if _, redrive := redriveOf[typ]; redrive {
			continue // TestRedriveDecodesAsItsInput
		}
		ev := sampleEvent(typ)
		if typ == TypeFailed || typ == TypeStageStarted {
			ev.Data.Stage = "UpgradePod"
		}
		body, err := Encode(ev)
		if err != nil {
			t.Fatalf("Encode(%s): %v", typ, err)
		}
		got, err := Decode(body)
		if err != nil {
			t.Fatalf("Decode(%s): %v", typ, err)
		}
		if !got.Time.Equal(ev.Time) {
			t.Errorf("%s: time %v, want %v", typ, got.Time, ev.Time)
		}
		got.Time = ev.Time
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(ev)
		if !bytes.Equal(gj, wj) {
			t.Errorf("%s: round trip\n got %s\nwant %s", typ, gj, wj)
		}
	}
}

func TestEncodeRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Event)
		want   string
	}{
		{"unknown type", func(e *Event) { e.Type = "dev.molt.sandbox.unknown.v1" }, "unknown event type"},
		{"no sandbox uid", func(e *Event) { e.Data.Sandbox.UID = "" }, "sandbox.uid"},
		{"no namespace", func(e *Event) { e.Data.Sandbox.Namespace = "" }, "sandbox.namespace"},
		{"no attempt", func(e *Event) { e.Data.Attempt = "" }, "attempt"},
		{"ops name without uid", func(e *Event) { e.Data.Ops.UID = "" }, "ops.name and ops.uid"},
		{"failed without reason", func(e *Event) { e.Data.Reason = "" }, "reason"},
		{"failed without stage", func(e *Event) { e.Data.Stage = "" }, "stage"},
		{"no id", func(e *Event) { e.ID = "" }, "id, source and time"},
		{"no time", func(e *Event) { e.Time = time.Time{} }, "id, source and time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := sampleEvent(TypeFailed)
			tt.mutate(&ev)
			_, err := Encode(ev)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Encode: err %v, want it to mention %q", err, tt.want)
			}
		})
	}
	direct := sampleEvent(TypePatched)
	direct.Data.Ops = OpsRef{}
	if _, err := Encode(direct); err != nil {
		t.Errorf("direct upgrade without ops: %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	good, err := Encode(sampleEvent(TypePatched))
	if err != nil {
		t.Fatal(err)
	}
	replace := func(old, new string) []byte { return bytes.Replace(good, []byte(old), []byte(new), 1) }
	tests := []struct {
		name string
		body []byte
	}{
		{"not json", []byte("{not json")},
		{"empty", nil},
		{"json but not a cloudevent", []byte(`{"hello":"world"}`)},
		{"old specversion", replace(`"specversion":"1.0"`, `"specversion":"0.3"`)},
		{"unknown type", replace(TypePatched, "dev.molt.sandbox.other.v1")},
		{"subject mismatch", replace(`"subject":"team-a/web.v1"`, `"subject":"team-a/other"`)},
		{"data not an object", []byte(`{"specversion":"1.0","id":"x","source":"s","type":"` + TypePatched +
			`","subject":"a/b","datacontenttype":"application/json","data":"just a string"}`)},
		{"missing sandbox uid", replace(`"uid":"22222222-2222-2222-2222-222222222222"`, `"uid":""`)},
		{"wrong content type", replace(`"datacontenttype":"application/json"`, `"datacontenttype":"text/plain"`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if bytes.Equal(tt.body, good) {
				t.Fatalf("test body unchanged; fix the replacement")
			}
			ev, err := Decode(tt.body)
			if !errors.Is(err, ErrUndecodable) {
				t.Fatalf("Decode = %+v, %v; want ErrUndecodable", ev, err)
			}
		})
	}
}

func TestMessageID(t *testing.T) {
	base := sampleEvent(TypeStageStarted)
	if MessageID(base) != MessageID(base) || len(MessageID(base)) != 32 {
		t.Fatalf("MessageID not deterministic 32 hex chars: %q", MessageID(base))
	}
	tests := []struct {
		name   string
		mutate func(*Event)
	}{
		{"ops uid", func(e *Event) { e.Data.Ops.UID = "x" }},
		{"sandbox uid", func(e *Event) { e.Data.Sandbox.UID = "x" }},
		{"attempt", func(e *Event) { e.Data.Attempt = "2" }},
		{"type", func(e *Event) { e.Type = TypeFailed }},
		{"stage", func(e *Event) { e.Data.Stage = "PostUpgrade" }},
		{"field boundary", func(e *Event) { e.Data.Attempt, e.Data.Stage = "1P", "reUpgrade" }},
		{"redrive", func(e *Event) { e.Data.Redrive = 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := base
			tt.mutate(&ev)
			if MessageID(ev) == MessageID(base) {
				t.Fatalf("changing %s kept the id", tt.name)
			}
		})
	}
	// Fields outside the identity do not change it: a republish with a new time or message
	// is the same event.
	later := base
	later.Time = base.Time.Add(time.Hour)
	later.Data.Message = "retried"
	if MessageID(later) != MessageID(base) {
		t.Fatalf("time or message changed the id")
	}
}

// TestRedriveDecodesAsItsInput: a re-drive is published on a subject of its
// own (statusagg may publish no other service's event) and comes back from
// Decode as the input it stands for, its number kept, so that the input's
// consumer handles it as that input. One without a number is refused.
func TestRedriveDecodesAsItsInput(t *testing.T) {
	for redrive, in := range redriveOf {
		ev := sampleEvent(redrive)
		ev.Data.Redrive = 0
		if _, err := Encode(ev); err == nil {
			t.Errorf("Encode(%s) with no re-drive number: nil error, want refused", redrive)
		}
		ev.Data.Redrive = 2
		subject, err := ev.Subject()
		tok, _ := TokenFor(in)
		if err != nil || subject != SandboxSubject(ev.Data.Sandbox.Namespace, ev.Data.Sandbox.Name, "redrive-"+tok) {
			t.Errorf("%s: subject %q (%v), want the input's token %q after redrive-", redrive, subject, err, tok)
		}
		body, err := Encode(ev)
		if err != nil {
			t.Fatalf("Encode(%s): %v", redrive, err)
		}
		got, err := Decode(body)
		if err != nil {
			t.Fatalf("Decode(%s): %v", redrive, err)
		}
		if got.Type != in || !got.Redriven || got.Data.Redrive != 2 || got.Data.Sandbox != ev.Data.Sandbox || got.Data.Attempt != ev.Data.Attempt {
			t.Errorf("Decode(%s) = %+v, want type %s, Redriven, with re-drive 2 and the same sandbox and attempt", redrive, got, in)
		}
		// The input itself with a re-drive number (podcycler reports a re-driven
		// wait's outcome so) is not a re-drive.
		plain := sampleEvent(in)
		plain.Data.Redrive = 2
		if body, err := Encode(plain); err != nil {
			t.Errorf("Encode(%s) with a re-drive number: %v", in, err)
		} else if got, err := Decode(body); err != nil || got.Redriven {
			t.Errorf("Decode(%s with re-drive number 2) = Redriven %v (%v), want false: only a re-drive's own type says it", in, got.Redriven, err)
		}
		if back, ok := RedriveType(in); !ok || back != redrive {
			t.Errorf("RedriveType(%s) = %q, %v; want %s", in, back, ok, redrive)
		}
	}
	for _, never := range []string{TypePatched, TypePostHookDone, TypeFailed, TypeStageStarted} {
		if r, ok := RedriveType(never); ok {
			t.Errorf("RedriveType(%s) = %s, want none: the watchdog never re-drives it", never, r)
		}
	}
}
