// Package v1alpha1 holds the agents.kruise.io/v1alpha1 API that molt serves:
// SandboxUpdateOps, Sandbox, SandboxSet and Checkpoint, field for field
// compatible with OpenKruise Agents (see shared/API.md).
//
// The kubebuilder markers on the types are the source of deploy/crds (run
// hack/update-codegen.sh after editing them); wellknown.go names the labels,
// annotations, finalizer, condition types and reasons that make up the wire
// contract, and helpers.go holds the few rules every service must read the
// same way (defaults of maxUnavailable, hook timeout and state filter).
//
// +k8s:deepcopy-gen=package
// +groupName=agents.kruise.io
package v1alpha1
