package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Sandbox is one agent sandbox: a pod built from a template, which can be
// paused, resumed and upgraded in place of its pod.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=sandboxes,singular=sandbox,shortName=sbx,scope=Namespaced
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Claimed",type=string,JSONPath=".metadata.labels.agents\\.kruise\\.io/sandbox-claimed"
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=".status.message"
// +kubebuilder:printcolumn:name="Upgrading",type=string,priority=1,JSONPath=".status.conditions[?(@.type==\"Upgrading\")].reason",description="Reason of the Upgrading condition: the upgrade stage, or how it ended"
// +kubebuilder:printcolumn:name="Revision",type=string,priority=1,JSONPath=".status.updateRevision",description="Hash of the template the sandbox runs"
// +kubebuilder:printcolumn:name="Ops",type=string,priority=1,JSONPath=".metadata.labels.agents\\.kruise\\.io/update-ops",description="SandboxUpdateOps that claimed the sandbox"
// +kubebuilder:printcolumn:name="IP",type=string,priority=1,JSONPath=".status.sandboxIp"
// +kubebuilder:printcolumn:name="Node",type=string,priority=1,JSONPath=".status.nodeName"
type Sandbox struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired sandbox.
	// +required
	Spec SandboxSpec `json:"spec"`

	// Status is the observed sandbox.
	// +optional
	Status SandboxStatus `json:"status,omitempty"`
}

// SandboxSpec is the desired state of a Sandbox.
type SandboxSpec struct {
	// Paused stops the sandbox's pod while keeping what persistentContents
	// names; false resumes it.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// PersistentContents names what survives a pause or checkpoint: ip,
	// memory, filesystem.
	// +optional
	// +listType=atomic
	PersistentContents []string `json:"persistentContents,omitempty"`

	// Runtimes are the runtime sidecars injected into the sandbox, e.g.
	// [{name: agent-runtime}] for lifecycle hooks, [{name: csi}] for storage.
	// +optional
	// +listType=atomic
	Runtimes []RuntimeConfig `json:"runtimes,omitempty"`

	// Lifecycle holds the hooks run around an upgrade of this sandbox.
	// +optional
	Lifecycle *SandboxLifecycle `json:"lifecycle,omitempty"`

	// UpgradePolicy enables upgrading this sandbox when its template
	// changes, and says how. Unset means a template change does not upgrade
	// the sandbox by itself.
	// +optional
	UpgradePolicy *SandboxUpgradePolicy `json:"upgradePolicy,omitempty"`

	EmbeddedSandboxTemplate `json:",inline"`
}

// SandboxUpgradePolicy says how a sandbox is upgraded when its template
// changes.
type SandboxUpgradePolicy struct {
	// Type is Recreate or CheckpointRestore.
	// +optional
	// +kubebuilder:validation:Enum=Recreate;CheckpointRestore
	Type UpgradeType `json:"type,omitempty"`
}

// SandboxPhase is where a Sandbox is in its life.
// +enum
type SandboxPhase string

const (
	// SandboxPending: accepted, its pod not running yet.
	SandboxPending SandboxPhase = "Pending"
	// SandboxRunning: its pod runs and is ready.
	SandboxRunning SandboxPhase = "Running"
	// SandboxPaused: its pod is stopped for a pause.
	SandboxPaused SandboxPhase = "Paused"
	// SandboxResuming: its pod is being brought back from a pause.
	SandboxResuming SandboxPhase = "Resuming"
	// SandboxUpgrading: its pod is being replaced by an upgrade; the
	// Upgrading condition's reason says which stage it is in.
	SandboxUpgrading SandboxPhase = "Upgrading"
	// SandboxSucceeded: its pod ended successfully; it is not upgraded.
	SandboxSucceeded SandboxPhase = "Succeeded"
	// SandboxFailed: its pod ended in failure; it is not upgraded.
	SandboxFailed SandboxPhase = "Failed"
	// SandboxTerminating: it is being deleted.
	SandboxTerminating SandboxPhase = "Terminating"
)

// SandboxStatus is the observed state of a Sandbox.
type SandboxStatus struct {
	// ObservedGeneration is the spec generation this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is Pending, Running, Paused, Resuming, Upgrading, Succeeded,
	// Failed or Terminating.
	// +optional
	// +kubebuilder:validation:Enum=Pending;Running;Paused;Resuming;Upgrading;Succeeded;Failed;Terminating
	Phase SandboxPhase `json:"phase,omitempty"`

	// Message says why the sandbox is in its phase, for people.
	// +optional
	Message string `json:"message,omitempty"`

	// Conditions are the latest observations of the sandbox (Ready,
	// Upgrading, SandboxPaused).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchMergeKey=type
	// +patchStrategy=merge
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// UpdateRevision is the hash of the template the sandbox's pod should
	// be built from; the pod carries it as its pod-template-hash label.
	// +optional
	UpdateRevision string `json:"updateRevision,omitempty"`

	// PodInfo describes the sandbox's current pod.
	// +optional
	PodInfo PodInfo `json:"podInfo,omitzero"`

	// SandboxIP is the address the sandbox is reached at.
	// +optional
	SandboxIP string `json:"sandboxIp,omitempty"`

	// NodeName is the node the sandbox runs on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// PodInfo describes the pod that currently backs a sandbox.
type PodInfo struct {
	// PodIP is the pod's address.
	// +optional
	PodIP string `json:"podIP,omitempty"`

	// NodeName is the node the pod is scheduled on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// PodUID is the pod's UID, used as a precondition when the pod is
	// deleted or replaced.
	// +optional
	PodUID types.UID `json:"podUID,omitempty"`

	// Labels are the pod's labels that matter to the sandbox.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations are the pod's annotations that matter to the sandbox.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// SandboxList is a list of Sandboxes.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type SandboxList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Sandbox `json:"items"`
}
