package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// SandboxSet keeps a warm pool of idle (unclaimed) sandboxes built from one
// template. A template change replaces the idle sandboxes, maxUnavailable at
// a time; claimed sandboxes are never touched by the pool.
//
// Users change replicas through the scale subresource and the template with
// patches, because the controller keeps writing status.
//
// +genclient
// +genclient:method=GetScale,verb=get,subresource=scale,result=k8s.io/api/autoscaling/v1.Scale
// +genclient:method=UpdateScale,verb=update,subresource=scale,input=k8s.io/api/autoscaling/v1.Scale,result=k8s.io/api/autoscaling/v1.Scale
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:path=sandboxsets,singular=sandboxset,shortName=sbs,scope=Namespaced
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=".status.replicas",description="Idle sandboxes in the pool, creating or available"
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=".status.availableReplicas",description="Idle sandboxes ready to be claimed"
// +kubebuilder:printcolumn:name="UpdatedReplicas",type=integer,JSONPath=".status.updatedReplicas",description="Idle sandboxes built from the current template"
// +kubebuilder:printcolumn:name="UpdatedAvailableReplicas",type=integer,JSONPath=".status.updatedAvailableReplicas",description="Available sandboxes built from the current template"
// +kubebuilder:printcolumn:name="UpdateRevision",type=string,JSONPath=".status.updateRevision",description="Hash of the current template"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="!has(self.metadata) || !has(self.metadata.name) || self.metadata.name.size() <= 63",fieldPath=".metadata.name",message="metadata.name must be at most 63 characters: it is the value of the agents.kruise.io/sandbox-pool and sandbox-template labels on each sandbox of the pool, and a label value is at most 63 characters"
type SandboxSet struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired pool.
	// +required
	Spec SandboxSetSpec `json:"spec"`

	// Status is the observed pool.
	// +optional
	Status SandboxSetStatus `json:"status,omitempty"`
}

// SandboxSetSpec is the desired state of a SandboxSet.
type SandboxSetSpec struct {
	// Replicas is the size of the idle pool: creating plus available
	// sandboxes, claimed ones excluded.
	// +required
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas"`

	// PersistentContents is copied to every sandbox of the pool.
	// +optional
	// +listType=atomic
	PersistentContents []string `json:"persistentContents,omitempty"`

	// Runtimes is copied to every sandbox of the pool.
	// +optional
	// +listType=atomic
	Runtimes []RuntimeConfig `json:"runtimes,omitempty"`

	// UpdateStrategy paces the replacement of idle sandboxes after a
	// template change.
	// +optional
	UpdateStrategy SandboxSetUpdateStrategy `json:"updateStrategy,omitzero"`

	// ScaleStrategy paces scaling of the pool.
	// +optional
	ScaleStrategy SandboxSetScaleStrategy `json:"scaleStrategy,omitzero"`

	EmbeddedSandboxTemplate `json:",inline"`
}

// SandboxSetUpdateStrategy paces the replacement of idle sandboxes.
type SandboxSetUpdateStrategy struct {
	// MaxUnavailable is how many idle sandboxes may be replaced at once: an
	// integer, or a percentage of spec.replicas rounded up. Defaults to
	// 20%.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="maxUnavailable must be a non-negative integer or a percentage like \"10%\" (0% to 100%); write a count without quotes (1, not \"1\")"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// SandboxSetScaleStrategy paces scaling of the pool.
type SandboxSetScaleStrategy struct {
	// MaxUnavailable is how many sandboxes may be created but not yet
	// available at once: an integer, or a percentage of spec.replicas
	// rounded up.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="maxUnavailable must be a non-negative integer or a percentage like \"10%\" (0% to 100%); write a count without quotes (1, not \"1\")"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// SandboxSetStatus is the observed state of a SandboxSet. Its counters are
// always serialised, even when 0.
type SandboxSetStatus struct {
	// ObservedGeneration is the spec generation this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replicas is the number of idle sandboxes, creating or available.
	// +optional
	Replicas int32 `json:"replicas"`

	// AvailableReplicas is the number of idle sandboxes ready to be
	// claimed.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas"`

	// UpdateRevision is the hash of the current template; idle sandboxes
	// carry the revision they were built from in the template-hash label.
	// +optional
	UpdateRevision string `json:"updateRevision,omitempty"`

	// UpdatedReplicas is the number of idle sandboxes built from the
	// current template.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas"`

	// UpdatedAvailableReplicas is the number of available sandboxes built
	// from the current template.
	// +optional
	UpdatedAvailableReplicas int32 `json:"updatedAvailableReplicas"`

	// Selector selects the pool's idle sandboxes, in label-selector string
	// form for the scale subresource:
	// "agents.kruise.io/sandbox-claimed=false,agents.kruise.io/sandbox-pool=<name>".
	// +optional
	Selector string `json:"selector,omitempty"`

	// Conditions are the latest observations of the pool.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchMergeKey=type
	// +patchStrategy=merge
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// SandboxSetList is a list of SandboxSets.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type SandboxSetList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []SandboxSet `json:"items"`
}
