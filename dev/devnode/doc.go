// Package devnode does, for the local stack's kwok nodes, the parts of a
// kubelet that kwok's stages should not: it finishes a pod's graceful
// deletion with a UID precondition, so a delete meant for an old pod can
// never remove a newer pod that reuses its name (what an upgrade does).
package devnode
