package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// SandboxUpdateOps upgrades the claimed sandboxes of its namespace that its
// selector matches: it patches each one's pod template and recreates its pod,
// running the lifecycle hooks around the recreate, at most maxUnavailable at
// a time.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=sandboxupdateops,singular=sandboxupdateops,shortName=suo,scope=Namespaced
// +kubebuilder:printcolumn:name="PHASE",type=string,JSONPath=".status.phase",description="Pending, Updating, Completed or Failed"
// +kubebuilder:printcolumn:name="TOTAL",type=integer,JSONPath=".status.replicas",description="Sandboxes selected for the upgrade"
// +kubebuilder:printcolumn:name="UPDATED",type=integer,JSONPath=".status.updatedReplicas",description="Sandboxes upgraded"
// +kubebuilder:printcolumn:name="UPDATING",type=integer,JSONPath=".status.updatingReplicas",description="Sandboxes being upgraded"
// +kubebuilder:printcolumn:name="FAILED",type=integer,JSONPath=".status.failedReplicas",description="Sandboxes whose upgrade failed"
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="PAUSED",type=boolean,JSONPath=".spec.paused",priority=1,description="spec.paused: no new sandbox is admitted"
// +kubebuilder:printcolumn:name="REASON",type=string,JSONPath=`.status.conditions[?(@.type=="Progressing")].reason`,priority=1,description="Why it is where it is: the Progressing condition's reason (Paused, NoBackup, SandboxesStarting, ...)"
// +kubebuilder:validation:XValidation:rule="!has(self.metadata) || !has(self.metadata.name) || self.metadata.name.size() <= 63",fieldPath=".metadata.name",message="metadata.name must be at most 63 characters: molt writes it as the value of the agents.kruise.io/update-ops label on each sandbox it claims, and a label value is at most 63 characters"
type SandboxUpdateOps struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what to upgrade and how.
	// +required
	Spec SandboxUpdateOpsSpec `json:"spec"`

	// Status is the progress of the upgrade.
	// +optional
	Status SandboxUpdateOpsStatus `json:"status,omitempty"`
}

// SandboxUpdateOpsSpec says which sandboxes to upgrade, what to change and
// how. Selector, patch and lifecycle are fixed at creation; paused,
// updateStrategy and stateFilter may change while the upgrade runs.
//
// +kubebuilder:validation:XValidation:rule="has(self.selector)",message="spec.selector is required",fieldPath=".selector",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.updateStrategy) || !has(self.updateStrategy.type) || self.updateStrategy.type != 'CheckpointRestore' || !has(self.patch) || !has(self.patch.spec) || ((!has(self.patch.spec.containers) || self.patch.spec.containers.all(c, !has(c.image))) && (!has(self.patch.spec.initContainers) || self.patch.spec.initContainers.all(c, !has(c.image))))",message="a CheckpointRestore upgrade cannot change a container or initContainer image; use updateStrategy.type Recreate",fieldPath=".patch"
// +kubebuilder:validation:XValidation:rule="has(self.selector) == has(oldSelf.selector) && (!has(self.selector) || self.selector == oldSelf.selector)",message="selector is immutable: delete this SandboxUpdateOps and create a new one. To pause or resume it, change only spec.paused: kubectl patch suo <name> --type merge -p '{\"spec\":{\"paused\":true}}' (kubectl apply sends the manifest's selector: one that differs, or has none, changes it)",fieldPath=".selector"
// +kubebuilder:validation:XValidation:rule="has(self.patch) == has(oldSelf.patch) && (!has(self.patch) || self.patch == oldSelf.patch)",message="patch is immutable: delete this SandboxUpdateOps and create a new one. To pause or resume it, change only spec.paused: kubectl patch suo <name> --type merge -p '{\"spec\":{\"paused\":true}}' (kubectl apply sends the manifest's patch: one that differs, or has none, changes it)",fieldPath=".patch"
// +kubebuilder:validation:XValidation:rule="has(self.lifecycle) == has(oldSelf.lifecycle) && (!has(self.lifecycle) || self.lifecycle == oldSelf.lifecycle)",message="lifecycle is immutable: delete this SandboxUpdateOps and create a new one. To pause or resume it, change only spec.paused: kubectl patch suo <name> --type merge -p '{\"spec\":{\"paused\":true}}' (kubectl apply sends the manifest's lifecycle: one that differs, or has none, changes it)",fieldPath=".lifecycle"
type SandboxUpdateOpsSpec struct {
	// The schema leaves selector optional so that the CEL rule on the spec,
	// not a bare "Required value", refuses an ops without one.

	// Selector picks the sandboxes of this namespace to upgrade by label.
	// Required: an ops without one is refused, as upstream does; {} selects
	// every sandbox of the namespace. Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="matchExpressions operator must be one of In, NotIn, Exists, DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn'] ? (has(e.values) && size(e.values) > 0) : (e.operator in ['Exists', 'DoesNotExist'] ? (!has(e.values) || size(e.values) == 0) : true))",message="matchExpressions values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist"
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// UpdateStrategy says how each sandbox is upgraded and how many at once.
	// +optional
	// +kubebuilder:default={}
	UpdateStrategy SandboxUpdateOpsStrategy `json:"updateStrategy,omitzero"`

	// The schema of patch.spec.containers[].image and
	// initContainers[].image, which the CheckpointRestore rule above reads,
	// is added to the CRD by hack/crd-overlays (controller-gen cannot
	// declare fields inside a RawExtension); the rule follows
	// upgrade.SetsImage.

	// Patch is a Strategic Merge Patch applied to each selected sandbox's
	// pod template ({metadata, spec}). It is kept byte for byte, so
	// directives such as `$patch: delete` survive. Under CheckpointRestore
	// it may not set a container or initContainer image. Immutable.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Patch runtime.RawExtension `json:"patch,omitzero"`

	// Lifecycle holds the hooks run around each sandbox's upgrade. They
	// replace the sandbox's own hooks for this upgrade. Immutable.
	// +optional
	Lifecycle *SandboxLifecycle `json:"lifecycle,omitempty"`

	// Paused stops new sandboxes from starting their upgrade; those already
	// upgrading finish.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// StateFilter says which sandbox phases are eligible. Empty means
	// [Running].
	// +optional
	StateFilter *UpgradeStateFilter `json:"stateFilter,omitempty"`
}

// SandboxUpdateOpsStrategy says how each sandbox is upgraded and how many at
// once.
type SandboxUpdateOpsStrategy struct {
	// Type is how each sandbox's pod is replaced. Defaults to Recreate.
	// +optional
	// +kubebuilder:default=Recreate
	// +kubebuilder:validation:Enum=Recreate;CheckpointRestore
	Type UpgradeType `json:"type,omitempty"`

	// MaxUnavailable is how many sandboxes may be upgrading (or have failed)
	// at once: an integer, or a percentage of the selected sandboxes rounded
	// up. Unset, 0, "0%" or a result of 0 all mean 1.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="maxUnavailable must be a non-negative integer or a percentage like \"10%\" (0% to 100%); write a count without quotes (1, not \"1\")"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// UpgradeStateFilter says which sandbox phases an ops picks up. A sandbox
// left mid-upgrade by a failed ops is eligible whatever the filter says.
type UpgradeStateFilter struct {
	// States lists the eligible phases: Running, Paused or both. Empty means
	// [Running]. Paused sandboxes are woken, upgraded and paused again.
	// +optional
	// +listType=set
	// +kubebuilder:validation:items:Enum=Running;Paused
	States []SandboxPhase `json:"states,omitempty"`
}

// SandboxUpdateOpsPhase is where a SandboxUpdateOps is in its life.
// +enum
type SandboxUpdateOpsPhase string

const (
	// SandboxUpdateOpsPending: created, not started yet (for example waiting
	// for another active ops in the namespace to end).
	SandboxUpdateOpsPending SandboxUpdateOpsPhase = "Pending"
	// SandboxUpdateOpsUpdating: sandboxes are being upgraded.
	SandboxUpdateOpsUpdating SandboxUpdateOpsPhase = "Updating"
	// SandboxUpdateOpsCompleted: every selected sandbox was upgraded.
	SandboxUpdateOpsCompleted SandboxUpdateOpsPhase = "Completed"
	// SandboxUpdateOpsFailed: the ops ended with some sandboxes failed.
	SandboxUpdateOpsFailed SandboxUpdateOpsPhase = "Failed"
)

// SandboxUpdateOpsStatus is the progress of an upgrade. The four counters
// are always serialised, even when 0, so `kubectl get` and clients reading
// raw JSON never see them missing; total = updated + failed + updating +
// not yet started.
type SandboxUpdateOpsStatus struct {
	// ObservedGeneration is the spec generation this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is Pending, Updating, Completed or Failed.
	// +optional
	// +kubebuilder:validation:Enum=Pending;Updating;Completed;Failed
	Phase SandboxUpdateOpsPhase `json:"phase,omitempty"`

	// Replicas is the number of sandboxes selected for the upgrade.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas"`

	// UpdatedReplicas is the number of sandboxes upgraded successfully.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UpdatedReplicas int32 `json:"updatedReplicas"`

	// UpdatingReplicas is the number of sandboxes being upgraded.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UpdatingReplicas int32 `json:"updatingReplicas"`

	// FailedReplicas is the number of sandboxes whose upgrade failed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailedReplicas int32 `json:"failedReplicas"`

	// Conditions are the latest observations of the ops (Progressing,
	// FailureBudgetExhausted, WaitingForNamespace).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchMergeKey=type
	// +patchStrategy=merge
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// SandboxUpdateOpsList is a list of SandboxUpdateOps.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type SandboxUpdateOpsList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []SandboxUpdateOps `json:"items"`
}
