package upgrade

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/api/equality"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// AnnotationAttemptHooks holds, on a sandbox, the hooks its current attempt
// runs: the spec.lifecycle it began with, fixed for its whole run, so a
// preUpgrade's backup and the postUpgrade that restores it are always one
// pair. A spec.lifecycle edited mid-upgrade (by hand, or by a tool that
// keeps the sandbox's spec) applies to the next upgrade only. Written by the
// patcher: for an ops's attempt in the same patch as the ops's
// spec.lifecycle, for a direct attempt before anything else is done; read by
// hookrunner (the hook it runs) and statusagg's watchdog (the stage's
// deadline), through HooksFor. Its value is an AttemptHooks in JSON.
const AnnotationAttemptHooks = "molt.dev/attempt-hooks"

// AttemptHooks is the value of AnnotationAttemptHooks.
type AttemptHooks struct {
	Attempt string `json:"attempt"`
	// Lifecycle is the attempt's hooks (null: it runs none).
	Lifecycle *agentsv1alpha1.SandboxLifecycle `json:"lifecycle"`
	// OverNone says that an ops's attempt wrote Lifecycle into a sandbox
	// with no hooks of its own (its spec.lifecycle was empty, or an earlier
	// ops's written over none): while spec.lifecycle is still Lifecycle,
	// the next ops does not keep it as the sandbox's own (KeepOwnLifecycle).
	// Set only on that positive proof: hooks of its own that equal the
	// ops's look the same in spec.lifecycle.
	OverNone bool `json:"overNone,omitempty"`
}

// AttemptHooksValue is the AnnotationAttemptHooks value of attempt running
// lifecycle.
func AttemptHooksValue(attempt string, lifecycle *agentsv1alpha1.SandboxLifecycle) string {
	return attemptHooksValue(AttemptHooks{Attempt: attempt, Lifecycle: lifecycle})
}

// OpsAttemptHooksValue is the AnnotationAttemptHooks value an ops's attempt
// writes with lifecycle, its hooks, into sb: OverNone when sb has no hooks
// of its own (OwnsNoHooks).
func OpsAttemptHooksValue(sb *agentsv1alpha1.Sandbox, attempt string, lifecycle *agentsv1alpha1.SandboxLifecycle) string {
	return attemptHooksValue(AttemptHooks{Attempt: attempt, Lifecycle: lifecycle, OverNone: OwnsNoHooks(sb)})
}

func attemptHooksValue(h AttemptHooks) string {
	// A string and a lifecycle of strings and ints always encode.
	b, _ := json.Marshal(h)
	return string(b)
}

// pinnedHooks reads sb's AnnotationAttemptHooks (ok false when it has none,
// or one that cannot be read).
func pinnedHooks(sb *agentsv1alpha1.Sandbox) (AttemptHooks, bool) {
	var pinned AttemptHooks
	value, ok := sb.Annotations[AnnotationAttemptHooks]
	if !ok || json.Unmarshal([]byte(value), &pinned) != nil {
		return AttemptHooks{}, false
	}
	return pinned, true
}

// HooksPinned reports whether sb's AnnotationAttemptHooks fixes lifecycle
// for attempt (whatever else it says).
func HooksPinned(sb *agentsv1alpha1.Sandbox, attempt string, lifecycle *agentsv1alpha1.SandboxLifecycle) bool {
	pinned, ok := pinnedHooks(sb)
	return ok && attempt != "" && pinned.Attempt == attempt && equality.Semantic.DeepEqual(pinned.Lifecycle, lifecycle)
}

// HooksFixedFor returns the attempt sb's AnnotationAttemptHooks fixes the
// hooks of ("" when there is none, or one that cannot be read).
func HooksFixedFor(sb *agentsv1alpha1.Sandbox) string {
	pinned, _ := pinnedHooks(sb)
	return pinned.Attempt
}

// HooksFor returns the hooks attempt runs on sb: those AnnotationAttemptHooks
// fixed for it, else (an attempt begun before the annotation was written, or
// a value that cannot be read) the sandbox's spec.lifecycle.
func HooksFor(sb *agentsv1alpha1.Sandbox, attempt string) *agentsv1alpha1.SandboxLifecycle {
	if pinned, ok := pinnedHooks(sb); ok && attempt != "" && pinned.Attempt == attempt {
		return pinned.Lifecycle
	}
	return sb.Spec.Lifecycle
}
