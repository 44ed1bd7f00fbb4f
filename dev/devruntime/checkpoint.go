package devruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/generated/clientset/versioned"
	agentslisters "molt.dev/pkg/generated/listers/agents/v1alpha1"

	"molt.dev/pkg/upgrade"
)

// The development checkpointer: what a production checkpointer does for a
// Checkpoint (README, "CheckpointRestore"), for the pods this runtime
// serves. It snapshots the pod's private root, everything the pod wrote
// outside its volumes, into checkpoints/<checkpoint uid> of the state
// directory, and marks the Checkpoint Succeeded with that id; a new pod
// annotated upgrade.AnnotationRestoreFrom gets the snapshot copied into its
// root before its runtime serves, and is then marked
// upgrade.AnnotationRestored.

// AnnotationFailCheckpoint, on a Sandbox, makes the development
// checkpointer fail its checkpoints with the annotation's value as the
// message: a way to exercise CheckpointFailed on purpose.
const AnnotationFailCheckpoint = "molt.dev/dev-checkpoint-fail"

// checkpointsDir holds the snapshots: checkpoints/<id>.
const checkpointsDir = "checkpoints"

// checkpointer takes the Checkpoints of pods this runtime serves.
type checkpointer struct {
	stateDir    string
	agents      versioned.Interface
	kube        kubernetes.Interface
	checkpoints agentslisters.CheckpointLister
	sandboxes   agentslisters.SandboxLister
	pods        corelisters.PodLister

	mu       sync.Mutex
	restored map[types.UID]bool // pods already restored by this process
}

// sync takes one Checkpoint, in this order: skip one that ended; find its
// pod (spec.podName, controlled by the sandbox spec.sandboxName); fail it
// on purpose when the sandbox asks (AnnotationFailCheckpoint); copy the
// pod's root into the store; mark it Succeeded with its id.
func (c *checkpointer) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	cp, err := c.checkpoints.Checkpoints(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get checkpoint %s: %w", key, err)
	}
	if cp.Status.Phase == agentsv1alpha1.CheckpointSucceeded || cp.Status.Phase == agentsv1alpha1.CheckpointFailed {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("checkpoint", klog.KObj(cp))
	sb, err := c.sandboxes.Sandboxes(ns).Get(cp.Spec.SandboxName)
	if err != nil {
		return c.finish(ctx, cp, "", fmt.Sprintf("sandbox %s/%s: %v", ns, cp.Spec.SandboxName, err))
	}
	if msg, ok := sb.Annotations[AnnotationFailCheckpoint]; ok {
		return c.finish(ctx, cp, "", "the development checkpointer was told to fail ("+AnnotationFailCheckpoint+"): "+msg)
	}
	pod, err := c.pods.Pods(ns).Get(cp.Spec.PodName)
	if err != nil || !upgrade.ControlledBy(pod, sb.UID) || pod.DeletionTimestamp != nil {
		return c.finish(ctx, cp, "", fmt.Sprintf("pod %s/%s of sandbox %s is not running (%v)", ns, cp.Spec.PodName, sb.Name, err))
	}
	id := string(cp.UID)
	dst := filepath.Join(c.stateDir, checkpointsDir, id)
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("clear snapshot %s: %w", dst, err)
	}
	if err := copyTree(ViewOf(c.stateDir, pod).Root, dst); err != nil {
		return c.finish(ctx, cp, "", fmt.Sprintf("snapshot the root of pod %s (uid %s): %v", pod.Name, pod.UID, err))
	}
	logger.Info("Checkpointed pod", "pod", klog.KObj(pod), "uid", pod.UID, "id", id)
	return c.finish(ctx, cp, id, "")
}

// finish marks cp Succeeded with id, or Failed with message.
func (c *checkpointer) finish(ctx context.Context, cp *agentsv1alpha1.Checkpoint, id, message string) error {
	updated := cp.DeepCopy()
	now := metav1.Now()
	updated.Status.ObservedGeneration, updated.Status.CompletionTime = cp.Generation, &now
	if message != "" {
		updated.Status.Phase, updated.Status.Message = agentsv1alpha1.CheckpointFailed, message
	} else {
		updated.Status.Phase, updated.Status.CheckpointID, updated.Status.Message = agentsv1alpha1.CheckpointSucceeded, id, "snapshot of the pod's root taken"
	}
	if _, err := c.agents.AgentsV1alpha1().Checkpoints(cp.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("mark checkpoint %s/%s %s: %w", cp.Namespace, cp.Name, updated.Status.Phase, err)
	}
	return nil
}

// restore copies the checkpoint a new pod is to be restored from into its
// root, once, and marks the pod restored. It runs before the pod's runtime
// serves, so no hook sees the pod before its files are back.
func (c *checkpointer) restore(ctx context.Context, pod *corev1.Pod) error {
	id := pod.Annotations[upgrade.AnnotationRestoreFrom]
	if id == "" || pod.Annotations[upgrade.AnnotationRestored] == id {
		return nil
	}
	c.mu.Lock()
	done := c.restored[pod.UID]
	c.mu.Unlock()
	if !done {
		src := filepath.Join(c.stateDir, checkpointsDir, id)
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("restore pod %s/%s from checkpoint %s: %w", pod.Namespace, pod.Name, id, err)
		}
		if err := copyTree(src, ViewOf(c.stateDir, pod).Root); err != nil {
			return fmt.Errorf("restore pod %s/%s from checkpoint %s: %w", pod.Namespace, pod.Name, id, err)
		}
		c.mu.Lock()
		c.restored[pod.UID] = true
		c.mu.Unlock()
	}
	patch := fmt.Appendf(nil, `{"metadata":{"uid":%q,"annotations":{%q:%q}}}`, pod.UID, upgrade.AnnotationRestored, id)
	if _, err := c.kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("mark pod %s/%s restored: %w", pod.Namespace, pod.Name, err)
	}
	klog.FromContext(ctx).Info("Restored pod from checkpoint", "pod", klog.KObj(pod), "uid", pod.UID, "id", id)
	return nil
}

// copyTree copies the directory tree src into dst (created if missing):
// directories, regular files and symlinks, with their modes.
func copyTree(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == src {
				return nil // a pod that never ran a command has no root yet
			}
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			_ = os.Remove(target)
			return os.Symlink(link, target)
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		}
		return nil // sockets, devices, pipes: not part of a workspace
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
