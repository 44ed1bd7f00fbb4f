package selector

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// misspellingTries bounds the templates pauseForMisspelling reads: a
// namespace's sandboxes mostly share one.
const misspellingTries = 20

// pauseForMisspelling pauses ops before its first sandbox when its patch adds
// a container that looks like a misspelt name of one the template has
// (upgrade.MisspeltContainers, on the templates of the sandboxes that would
// start from their own): spec.paused, upgrade.AnnotationMisspeltContainer and
// upgrade.AnnotationMisspeltPausedAt in one write, against the ops as read.
// It reports whether admission must wait (paused, or the ops changed since
// read). Only once per ops: resuming it is how a user says the new container
// is meant. An ops with a sandbox already admitted is not paused.
func (s *Selector) pauseForMisspelling(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) (bool, error) {
	if upgrade.PausedOnce(ops, upgrade.AnnotationMisspeltContainer, upgrade.AnnotationMisspeltPausedAt) || sel.NotStarted != sel.Total() {
		return false, nil
	}
	// The sandboxes that would start from their own template (not resuming
	// one an earlier attempt patched), up to misspellingTries of them.
	var found []string
	tried := 0
	for _, c := range sel.Candidates {
		if c.Resume || c.Sandbox.Spec.Template == nil {
			continue
		}
		if found = upgrade.MisspeltContainers(c.Sandbox.Spec.Template, ops.Spec.Patch.Raw); len(found) > 0 {
			break
		}
		if tried++; tried == misspellingTries {
			break
		}
	}
	if len(found) == 0 {
		return false, nil
	}
	value := strings.Join(found, ", ")
	return s.pauseOnce(ctx, ops, upgrade.AnnotationMisspeltContainer, upgrade.AnnotationMisspeltPausedAt, value,
		"its patch adds a container that looks like a misspelt name", "its patch adds "+value)
}

// pauseForNoBackup pauses ops before its first sandbox when it would give
// sandboxes a new pod with no backup of their workspace taken
// (upgrade.Unprotected): spec.paused,
// upgrade.AnnotationNoBackup (naming them) and upgrade.AnnotationNoBackupPausedAt
// in one write, against the ops as read. It reports whether admission must
// wait. Only once per ops: resuming it is how a user says those workspaces
// may go. An ops with a sandbox already admitted is not paused.
func (s *Selector) pauseForNoBackup(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) (bool, error) {
	if upgrade.PausedOnce(ops, upgrade.AnnotationNoBackup, upgrade.AnnotationNoBackupPausedAt) || sel.NotStarted != sel.Total() {
		return false, nil
	}
	names := upgrade.Unprotected(ops, sel)
	if len(names) == 0 {
		return false, nil
	}
	value := namedValue(names)
	return s.pauseOnce(ctx, ops, upgrade.AnnotationNoBackup, upgrade.AnnotationNoBackupPausedAt, value,
		"it would give sandboxes a new pod with no backup of their workspace", "sandboxes "+value+" have no backup")
}

// pauseForCheckpointKept pauses ops before its first sandbox when it would
// start sandboxes whose workspace is kept only in the checkpoint of a failed
// CheckpointRestore attempt from an empty filesystem
// (upgrade.CheckpointLeftBehind), as pauseForNoBackup does, with
// upgrade.AnnotationCheckpointKept naming them.
func (s *Selector) pauseForCheckpointKept(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) (bool, error) {
	if upgrade.PausedOnce(ops, upgrade.AnnotationCheckpointKept, upgrade.AnnotationCheckpointKeptPausedAt) || sel.NotStarted != sel.Total() {
		return false, nil
	}
	names := upgrade.CheckpointLeftBehind(ops, sel)
	if len(names) == 0 {
		return false, nil
	}
	value := namedValue(names)
	return s.pauseOnce(ctx, ops, upgrade.AnnotationCheckpointKept, upgrade.AnnotationCheckpointKeptPausedAt, value,
		"it would start sandboxes whose workspace is kept in a checkpoint from an empty filesystem", "sandboxes "+value+" have their workspace only in a checkpoint")
}

// pauseForBackupOffVolume pauses ops before its first sandbox when its hooks
// back up to paths none of which is on a volume that outlives the pod
// (upgrade.SelectedBackupOffVolumes), as pauseForNoBackup does, with
// upgrade.AnnotationBackupOffVolume naming the paths and the sandbox.
func (s *Selector) pauseForBackupOffVolume(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, sel upgrade.Selection) (bool, error) {
	if upgrade.PausedOnce(ops, upgrade.AnnotationBackupOffVolume, upgrade.AnnotationBackupOffVolumePausedAt) || sel.NotStarted != sel.Total() {
		return false, nil
	}
	name, paths := upgrade.SelectedBackupOffVolumes(ops, sel)
	if len(paths) == 0 {
		return false, nil
	}
	value := upgrade.BackupOffVolumeValue(name, paths)
	return s.pauseOnce(ctx, ops, upgrade.AnnotationBackupOffVolume, upgrade.AnnotationBackupOffVolumePausedAt, value,
		"its hooks back up to paths on no volume that outlives the pod", "its hooks name "+value)
}

// noBackupNamed is how many sandboxes AnnotationNoBackup (and
// AnnotationCheckpointKept) names.
const noBackupNamed = 10

// namedValue is the first noBackupNamed of names joined by commas, and
// " and N more".
func namedValue(names []string) string {
	value := strings.Join(names[:min(len(names), noBackupNamed)], ", ")
	if extra := len(names) - noBackupNamed; extra > 0 {
		value += fmt.Sprintf(" and %d more", extra)
	}
	return value
}

// pauseOnce writes spec.paused, the annotation (value) and the paused-at
// annotation (upgrade.PausedAtValue) in one merge patch against
// ops as read, and reports that admission must wait. A Conflict (the ops
// changed since read: the finalizer just added, a status write) waits
// quietly: its update event brings it back. why and what are for the log
// and the error.
func (s *Selector) pauseOnce(ctx context.Context, ops *agentsv1alpha1.SandboxUpdateOps, annotation, pausedAt, value, why, what string) (bool, error) {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": ops.ResourceVersion, "annotations": map[string]string{
			annotation: value,
			pausedAt:   upgrade.PausedAtValue(ops),
		}},
		"spec": map[string]any{"paused": true},
	})
	if err != nil {
		return false, err
	}
	_, err = s.client.AgentsV1alpha1().SandboxUpdateOps(ops.Namespace).Patch(ctx, ops.Name, types.MergePatchType, body, metav1.PatchOptions{})
	if apierrors.IsConflict(err) {
		klog.FromContext(ctx).V(2).Info("Ops changed since read; will look again before pausing it", "why", why, "annotation", annotation, "value", value)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("pause ops %s/%s before its first sandbox (%s): %w", ops.Namespace, ops.Name, what, err)
	}
	klog.FromContext(ctx).Info("Paused the ops before its first sandbox", "why", why, "annotation", annotation, "value", value)
	return true, nil
}
