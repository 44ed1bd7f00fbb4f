package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// This file holds the types that SandboxUpdateOps, Sandbox and SandboxSet
// share: how a sandbox is upgraded, the hooks around the upgrade, and the
// embedded pod template.

// UpgradeType says how a sandbox's pod is replaced by one built from the new
// template.
type UpgradeType string

const (
	// UpgradeTypeRecreate deletes the old pod and creates a new one. Memory,
	// IP and the root filesystem are lost; persistent volumes are kept. It
	// is the default.
	UpgradeTypeRecreate UpgradeType = "Recreate"
	// UpgradeTypeCheckpointRestore checkpoints the pod's root filesystem
	// before the old pod is deleted and restores it into the new pod. A
	// patch may not change any container image under this type.
	UpgradeTypeCheckpointRestore UpgradeType = "CheckpointRestore"
)

// SandboxLifecycle holds the hooks run inside a sandbox around its upgrade,
// through the sandbox's agent-runtime.
type SandboxLifecycle struct {
	// PreUpgrade runs in the old pod before it is deleted, typically to
	// back up the workspace. A failure leaves the old pod untouched.
	// +optional
	PreUpgrade *UpgradeAction `json:"preUpgrade,omitempty"`

	// PostUpgrade runs in the new pod once it is ready, typically to
	// restore the workspace.
	// +optional
	PostUpgrade *UpgradeAction `json:"postUpgrade,omitempty"`
}

// UpgradeAction is one lifecycle hook.
type UpgradeAction struct {
	// Exec is the command to run inside the sandbox. It is required: a hook
	// without exec is refused.
	// +required
	Exec *ExecAction `json:"exec"`

	// TimeoutSeconds bounds the hook's run, in seconds. Defaults to 60; at
	// most 86400 (a day): a stage, and a delete of its ops, waits for it.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// ExecAction is a command run through the agent-runtime's process API. The
// first element is the program, the rest its arguments; for a script use
// ["/bin/bash", "-c", "..."].
type ExecAction struct {
	// Command is the program and its arguments.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:items:MinLength=1
	Command []string `json:"command"`
}

// RuntimeConfig asks for a runtime sidecar to be injected into the sandbox.
type RuntimeConfig struct {
	// Name of the runtime, e.g. "agent-runtime" (needed by lifecycle hooks)
	// or "csi" (external storage mounts).
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

const (
	// RuntimeAgentRuntime is the RuntimeConfig name of the agent-runtime
	// (envd) sidecar that lifecycle hooks are executed through.
	RuntimeAgentRuntime = "agent-runtime"
	// RuntimeCSI is the RuntimeConfig name of the sidecar that mounts
	// external storage into the sandbox.
	RuntimeCSI = "csi"
)

// PersistentContentFilesystem is the persistentContents entry that keeps a
// sandbox's root filesystem across a pause or a checkpoint.
const PersistentContentFilesystem = "filesystem"

// EmbeddedSandboxTemplate is the pod template of a Sandbox or SandboxSet,
// given inline or by reference.
type EmbeddedSandboxTemplate struct {
	// TemplateRef references a template to build the sandbox from, as an
	// alternative to Template.
	// +optional
	TemplateRef *SandboxTemplateRef `json:"templateRef,omitempty"`

	// Template describes the sandbox's pod. It is stored as given (the CRD
	// keeps no schema for it) and validated when a pod is built from it.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Template *corev1.PodTemplateSpec `json:"template,omitempty"`

	// VolumeClaimTemplates are the persistent volume claims created for the
	// sandbox. They are kept across upgrades. Stored as given: the CRD keeps
	// no schema for them (a structural schema cannot say "array of
	// free-form objects" through controller-gen markers), so a malformed
	// value is only caught when a claim is built from it.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	VolumeClaimTemplates []corev1.PersistentVolumeClaim `json:"volumeClaimTemplates,omitempty"`

	// Undecodable is set, and Template and VolumeClaimTemplates are nil,
	// when the stored template does not decode into a pod template (a
	// field of the wrong type): see TemplateProblem. Not a field of the API.
	Undecodable *UndecodableTemplate `json:"-"`
}

// SandboxTemplateRef references the template a sandbox is built from.
type SandboxTemplateRef struct {
	// Name of the template.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// Kind of the template. Defaults to PodTemplate.
	// +optional
	Kind string `json:"kind,omitempty"`

	// APIVersion of the template. Defaults to v1.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
}
