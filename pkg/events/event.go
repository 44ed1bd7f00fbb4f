package events

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	ce "github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/apimachinery/pkg/types"
)

// CloudEvent types: reverse-DNS and versioned. A breaking change to a payload gets a new
// version (….v2) next to the old one; consumers decode only the types listed here.
const (
	// TypeRequested asks for one sandbox to be upgraded. Producers: selector (admission),
	// statusagg (the watchdog's re-drive of a stalled PreUpgrade). Consumer: patcher.
	TypeRequested = "dev.molt.sandbox.requested.v1"
	// TypePatched says the sandbox template now carries the patch. Producer: patcher.
	// Consumer: hookrunner (runs preUpgrade).
	TypePatched = "dev.molt.sandbox.patched.v1"
	// TypePreHookDone says preUpgrade succeeded (or there was none) on the old pod.
	// Producers: hookrunner, statusagg (the watchdog's re-drive of a stalled UpgradePod).
	// Consumer: podcycler (recreates the pod).
	TypePreHookDone = "dev.molt.sandbox.prehook.done.v1"
	// TypePodReady says the new pod of the target revision is Ready. Producers: podcycler,
	// patcher (an attempt that resumes at PostUpgrade on a pod already rebuilt), statusagg
	// (the watchdog's re-drive of a stalled PostUpgrade). Consumer: hookrunner (runs
	// postUpgrade).
	TypePodReady = "dev.molt.sandbox.pod.ready.v1"
	// TypePostHookDone ends a sandbox's upgrade successfully. Producer: hookrunner.
	// Consumer: statusagg (status, Events, metrics); the selector frees the sandbox's
	// maxUnavailable budget when statusagg's status shows Succeeded.
	TypePostHookDone = "dev.molt.sandbox.posthook.done.v1"
	// TypeFailed ends a sandbox's upgrade in a stage's failure reason (Data.Reason, Data.Message).
	// Producers: patcher, hookrunner, podcycler, statusagg (the watchdog). Consumer:
	// statusagg.
	TypeFailed = "dev.molt.sandbox.failed.v1"
	// TypeStageStarted reports progress: a stage (Data.Stage) began work on the sandbox.
	// Producers: hookrunner, podcycler, patcher (ResumeSucceed: a paused sandbox woken for
	// its upgrade has its old pod Ready). Consumer: statusagg.
	TypeStageStarted = "dev.molt.sandbox.stage.started.v1"

	// The watchdog's re-drives of a stalled stage (producer: statusagg only). Each stands
	// for the stage's input event, published again with Data.Redrive set, but on a subject
	// of its own, so that statusagg's NATS user may publish no other service's event
	// (DESIGN rule 14). Decode returns it as the type it stands for (RedriveOf), so a
	// consumer handles it as that input.

	// TypeRedriveRequested re-drives a stalled PreUpgrade: requested again. Consumer:
	// patcher.
	TypeRedriveRequested = "dev.molt.sandbox.redrive.requested.v1"
	// TypeRedrivePreHookDone re-drives a stalled UpgradePod or Checkpointing: prehook-done
	// again. Consumer: podcycler.
	TypeRedrivePreHookDone = "dev.molt.sandbox.redrive.prehook.done.v1"
	// TypeRedrivePodReady re-drives a stalled PostUpgrade: pod-ready again. Consumer:
	// hookrunner (postUpgrade).
	TypeRedrivePodReady = "dev.molt.sandbox.redrive.pod.ready.v1"
)

// redriveOf maps each re-drive type to the input event type it stands for.
var redriveOf = map[string]string{
	TypeRedriveRequested:   TypeRequested,
	TypeRedrivePreHookDone: TypePreHookDone,
	TypeRedrivePodReady:    TypePodReady,
}

// RedriveOf returns the input type a re-drive type stands for (ok false for any other
// type).
func RedriveOf(eventType string) (string, bool) {
	in, ok := redriveOf[eventType]
	return in, ok
}

// RedriveType returns the re-drive type that stands for the input type in (ok false for
// a type that is never re-driven).
func RedriveType(in string) (string, bool) {
	for r, of := range redriveOf {
		if of == in {
			return r, true
		}
	}
	return "", false
}

// Subject tokens: the last token of a sandbox subject, one per type. Dot-free by design so
// filters such as molt.*.*.patched stay exact.
const (
	TokenRequested    = "requested"     // TypeRequested
	TokenPatched      = "patched"       // TypePatched
	TokenPreHookDone  = "prehook-done"  // TypePreHookDone
	TokenPodReady     = "pod-ready"     // TypePodReady
	TokenPostHookDone = "posthook-done" // TypePostHookDone
	TokenFailed       = "failed"        // TypeFailed
	TokenStageStarted = "stage-started" // TypeStageStarted

	TokenRedriveRequested   = "redrive-requested"    // TypeRedriveRequested
	TokenRedrivePreHookDone = "redrive-prehook-done" // TypeRedrivePreHookDone
	TokenRedrivePodReady    = "redrive-pod-ready"    // TypeRedrivePodReady
)

var typeTokens = map[string]string{
	TypeRequested:    TokenRequested,
	TypePatched:      TokenPatched,
	TypePreHookDone:  TokenPreHookDone,
	TypePodReady:     TokenPodReady,
	TypePostHookDone: TokenPostHookDone,
	TypeFailed:       TokenFailed,
	TypeStageStarted: TokenStageStarted,

	TypeRedriveRequested:   TokenRedriveRequested,
	TypeRedrivePreHookDone: TokenRedrivePreHookDone,
	TypeRedrivePodReady:    TokenRedrivePodReady,
}

// Types returns every event type, sorted.
func Types() []string {
	out := make([]string, 0, len(typeTokens))
	for t := range typeTokens {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// TokenFor returns the subject token of a known event type.
func TokenFor(eventType string) (string, bool) {
	tok, ok := typeTokens[eventType]
	return tok, ok
}

// MediaType is the Content-Type header of every message: a structured-mode CloudEvent.
const MediaType = "application/cloudevents+json"

// dataContentType is the CloudEvent datacontenttype of Data.
const dataContentType = "application/json"

// ErrUndecodable marks a message that is not a valid molt CloudEvent (a poison message).
var ErrUndecodable = errors.New("undecodable event")

// OpsRef names the SandboxUpdateOps (in the sandbox's namespace) that drives the upgrade.
// Both fields are empty for a direct upgrade (Sandbox upgradePolicy, SandboxSet rollout).
type OpsRef struct {
	Name string    `json:"name,omitempty"`
	UID  types.UID `json:"uid,omitempty"`
}

// SandboxRef names the sandbox an event is about.
type SandboxRef struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// Data is the JSON payload (CloudEvent data) of every molt event.
type Data struct {
	Ops     OpsRef     `json:"ops"`
	Sandbox SandboxRef `json:"sandbox"`
	// Attempt identifies one try of one sandbox's upgrade within one ops; a new try (or a
	// direct upgrade to a new revision) uses a new attempt id. Part of the message id.
	Attempt string `json:"attempt"`
	// Stage is the Upgrading condition reason of the stage that produced or is reported by
	// the event (PreUpgrade, Checkpointing, UpgradePod, PostUpgrade, Resuming, ...).
	// Required for TypeFailed and TypeStageStarted. Part of the message id.
	Stage string `json:"stage,omitempty"`
	// Reason and Message explain a failure (TypeFailed), e.g. PreUpgradeFailed and
	// "hook failed with exit code 3, stderr: ...". Reason is required for TypeFailed.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`

	// Optional, set by the stage that knows them.
	TargetRevision string    `json:"targetRevision,omitempty"` // patcher onwards: the patched template hash
	OldPodUID      types.UID `json:"oldPodUID,omitempty"`      // hookrunner (pre), podcycler
	NewPodUID      types.UID `json:"newPodUID,omitempty"`      // podcycler, hookrunner (post)
	HookExitCode   *int32    `json:"hookExitCode,omitempty"`   // hookrunner
	// Checkpoint is true when the attempt checkpoints the pod and restores it
	// (CheckpointRestore): patcher, on patched; carried along to prehook-done, which
	// starts Checkpointing rather than UpgradePod however old a reader's copy of the
	// sandbox (without the patcher's strategy mark) is.
	Checkpoint bool `json:"checkpoint,omitempty"`
	// SandboxResourceVersion is the sandbox's resourceVersion as the publisher last wrote
	// it (selector: the claim, patcher: the template) or read it; carried along by every
	// stage. The next stage reads the sandbox at least as new as this from the API
	// server's watch cache instead of from etcd (upgrade.LoadClaimed); empty means a read
	// from etcd.
	SandboxResourceVersion string `json:"sandboxResourceVersion,omitempty"`

	// ResumedAttempt and ResumedReason name the failed attempt a new attempt continues
	// (selector, on requested; carried along by every stage): the pods that attempt built
	// are new pods, never a preUpgrade target.
	ResumedAttempt string `json:"resumedAttempt,omitempty"`
	ResumedReason  string `json:"resumedReason,omitempty"`
	// Redrive counts how often the watchdog (statusagg) re-published a stalled stage's
	// input; carried along by every stage. Part of the message id, so a re-driven chain is
	// not dropped as a duplicate of the one that stalled.
	Redrive int `json:"redrive,omitempty"`
	// HookStartedAt is, on a stage-started of PreUpgrade or PostUpgrade that
	// hookrunner publishes again (a redelivery, a re-drive), when the first
	// delivery started that hook: its timeout counts from then. Absent on
	// the first one, whose own time is the start.
	HookStartedAt *time.Time `json:"hookStartedAt,omitempty"`
}

// Event is one molt CloudEvent.
type Event struct {
	// Type is one of the Type constants.
	Type string
	// ID, Source and Time are filled in by Publisher.Publish (ID = MessageID, Source = the
	// publisher's service, Time = now unless set) and read back by Decode.
	ID     string
	Source string
	Time   time.Time
	Data   Data
	// Redriven is set by Decode for a re-drive (TypeRedrivePreHookDone, ...), which it
	// returns as the input type it stands for. Its consumer acts on it only for a stage
	// the sandbox's status shows (upgrade.RedriveRefusal), and statusagg does not record
	// it. Not part of the CloudEvent: the type on the wire says it.
	Redriven bool
}

// SandboxKey is the CloudEvent subject attribute: <namespace>/<name>.
func (e Event) SandboxKey() string {
	return e.Data.Sandbox.Namespace + "/" + e.Data.Sandbox.Name
}

// Subject is the NATS subject the event is published on.
func (e Event) Subject() (string, error) {
	tok, ok := TokenFor(e.Type)
	if !ok {
		return "", fmt.Errorf("event subject: unknown type %q", e.Type)
	}
	return SandboxSubject(e.Data.Sandbox.Namespace, e.Data.Sandbox.Name, tok), nil
}

// MessageID is the deterministic id of ev, used both as CloudEvent id and as JetStream
// Nats-Msg-Id: a hash of (ops uid, sandbox uid, attempt, type, stage). Stage is included
// because one attempt reports stage-started (and may fail) once per stage. A handler that is
// redelivered and publishes again produces the same id, and JetStream drops the copy within
// the stream's duplicate window. A re-driven event (Data.Redrive > 0) gets a new id.
func MessageID(ev Event) string {
	h := sha256.New()
	fields := []string{string(ev.Data.Ops.UID), string(ev.Data.Sandbox.UID), ev.Data.Attempt, ev.Type, ev.Data.Stage}
	if ev.Data.Redrive > 0 {
		fields = append(fields, fmt.Sprintf("redrive-%d", ev.Data.Redrive))
	}
	for _, f := range fields {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Validate checks what every consumer relies on.
func (e Event) Validate() error {
	d := e.Data
	var missing []string
	if _, ok := typeTokens[e.Type]; !ok {
		return fmt.Errorf("unknown event type %q", e.Type)
	}
	if d.Sandbox.Namespace == "" {
		missing = append(missing, "sandbox.namespace")
	}
	if d.Sandbox.Name == "" {
		missing = append(missing, "sandbox.name")
	}
	if d.Sandbox.UID == "" {
		missing = append(missing, "sandbox.uid")
	}
	if d.Attempt == "" {
		missing = append(missing, "attempt")
	}
	if (d.Ops.Name == "") != (d.Ops.UID == "") {
		missing = append(missing, "ops.name and ops.uid together")
	}
	if (e.Type == TypeFailed || e.Type == TypeStageStarted) && d.Stage == "" {
		missing = append(missing, "stage")
	}
	if _, redrive := redriveOf[e.Type]; redrive && d.Redrive < 1 {
		missing = append(missing, "redrive (a re-drive's number, 1 or more)")
	}
	if e.Type == TypeFailed && d.Reason == "" {
		missing = append(missing, "reason")
	}
	if len(missing) > 0 {
		return fmt.Errorf("event %s for %s: missing %v", e.Type, e.SandboxKey(), missing)
	}
	return nil
}

// Encode renders ev as a structured-mode JSON CloudEvent (specversion 1.0). ID, Source and
// Time must be set; Publisher.Publish sets them.
func Encode(ev Event) ([]byte, error) {
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	if ev.ID == "" || ev.Source == "" || ev.Time.IsZero() {
		return nil, fmt.Errorf("encode event %s for %s: id, source and time must be set", ev.Type, ev.SandboxKey())
	}
	c := ce.New(ce.CloudEventsVersionV1)
	c.SetID(ev.ID)
	c.SetSource(ev.Source)
	c.SetType(ev.Type)
	c.SetSubject(ev.SandboxKey())
	c.SetTime(ev.Time)
	if err := c.SetData(dataContentType, ev.Data); err != nil {
		return nil, fmt.Errorf("encode event %s for %s: %w", ev.Type, ev.SandboxKey(), err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("encode event %s for %s: %w", ev.Type, ev.SandboxKey(), err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode event %s for %s: %w", ev.Type, ev.SandboxKey(), err)
	}
	return b, nil
}

// Decode parses a structured-mode JSON CloudEvent produced by Encode. A re-drive
// (TypeRedrivePreHookDone, ...) comes back as the input type it stands for, with
// Data.Redrive set and Source statusagg. Every failure wraps ErrUndecodable: the message
// can never be handled and is a poison message.
func Decode(body []byte) (Event, error) {
	var c ce.Event
	if err := json.Unmarshal(body, &c); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrUndecodable, err)
	}
	if err := c.Validate(); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrUndecodable, err)
	}
	if c.SpecVersion() != ce.CloudEventsVersionV1 {
		return Event{}, fmt.Errorf("%w: specversion %q", ErrUndecodable, c.SpecVersion())
	}
	if ct := c.DataContentType(); ct != dataContentType {
		return Event{}, fmt.Errorf("%w: datacontenttype %q, want %s", ErrUndecodable, ct, dataContentType)
	}
	ev := Event{Type: c.Type(), ID: c.ID(), Source: c.Source(), Time: c.Time()}
	if err := c.DataAs(&ev.Data); err != nil {
		return Event{}, fmt.Errorf("%w: data: %w", ErrUndecodable, err)
	}
	if err := ev.Validate(); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrUndecodable, err)
	}
	if c.Subject() != ev.SandboxKey() {
		return Event{}, fmt.Errorf("%w: subject %q does not match sandbox %s", ErrUndecodable, c.Subject(), ev.SandboxKey())
	}
	if in, ok := redriveOf[ev.Type]; ok {
		ev.Type, ev.Redriven = in, true // handled as the input it re-drives
	}
	return ev, nil
}
