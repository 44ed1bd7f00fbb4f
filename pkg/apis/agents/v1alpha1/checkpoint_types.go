package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Checkpoint captures a sandbox's state (its root filesystem, and memory
// where supported) so that a new pod can be restored from it. A
// CheckpointRestore upgrade creates one owned by the sandbox and deletes it
// once the sandbox is upgraded.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=checkpoints,singular=checkpoint,shortName=cp,scope=Namespaced
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Sandbox",type=string,priority=1,JSONPath=".spec.sandboxName"
// +kubebuilder:printcolumn:name="CheckpointID",type=string,priority=1,JSONPath=".status.checkpointId"
type Checkpoint struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says what to checkpoint.
	// +required
	Spec CheckpointSpec `json:"spec"`

	// Status is the progress of the checkpoint.
	// +optional
	Status CheckpointStatus `json:"status,omitempty"`
}

// CheckpointSpec says what to checkpoint.
type CheckpointSpec struct {
	// SandboxName is the sandbox to checkpoint.
	// +optional
	SandboxName string `json:"sandboxName,omitempty"`

	// PodName is the pod to checkpoint.
	// +optional
	PodName string `json:"podName,omitempty"`

	// KeepRunning says whether the pod keeps running after the checkpoint.
	// Defaults to true.
	// +optional
	KeepRunning *bool `json:"keepRunning,omitempty"`

	// PersistentContents names what the checkpoint keeps: filesystem,
	// memory.
	// +optional
	// +listType=atomic
	PersistentContents []string `json:"persistentContents,omitempty"`

	// TTLAfterFinished is how long a finished checkpoint is kept before it
	// is deleted, as a number with a unit: "30s", "30m", "30d".
	// +optional
	TTLAfterFinished *string `json:"ttlAfterFinished,omitempty"`
}

// CheckpointPhase is where a Checkpoint is in its life.
// +enum
type CheckpointPhase string

const (
	// CheckpointPending: accepted, not started.
	CheckpointPending CheckpointPhase = "Pending"
	// CheckpointCreating: the checkpoint is being taken.
	CheckpointCreating CheckpointPhase = "Creating"
	// CheckpointSucceeded: status.checkpointId can be restored from.
	CheckpointSucceeded CheckpointPhase = "Succeeded"
	// CheckpointFailed: no checkpoint was taken; status.message says why.
	CheckpointFailed CheckpointPhase = "Failed"
)

// CheckpointStatus is the progress of a Checkpoint.
type CheckpointStatus struct {
	// ObservedGeneration is the spec generation this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is Pending, Creating, Succeeded or Failed.
	// +optional
	// +kubebuilder:validation:Enum=Pending;Creating;Succeeded;Failed
	Phase CheckpointPhase `json:"phase,omitempty"`

	// Message says why the checkpoint is in its phase, for people.
	// +optional
	Message string `json:"message,omitempty"`

	// CheckpointID identifies the checkpoint to restore a pod from.
	// +optional
	CheckpointID string `json:"checkpointId,omitempty"`

	// CompletionTime is when the checkpoint Succeeded or Failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// CheckpointList is a list of Checkpoints.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type CheckpointList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Checkpoint `json:"items"`
}
