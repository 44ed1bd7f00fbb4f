package devruntime

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// View is the filesystem and hostname a pod's commands see.
type View struct {
	// Root is the pod's root directory: commands see the host's system
	// directories read-only over it and run in their own PID namespace
	// (see enterRoot). "" runs commands on the host's filesystem, as the
	// host's processes (tests of the protocol alone).
	Root string `json:"root,omitempty"`
	// Hostname is what `hostname` prints; "" keeps the host's.
	Hostname string `json:"hostname,omitempty"`
	// Mounts are bound over Root, shortest target first.
	Mounts []Mount `json:"mounts,omitempty"`
}

// Mount binds the host directory Source, or the directory SubPath inside
// it, at Target inside the view. SubPath is resolved without following
// symlinks: the pod writes the volume's files.
type Mount struct {
	Source  string `json:"source"`
	SubPath string `json:"subPath,omitempty"`
	Target  string `json:"target"`
}

// The state directory's layout.
const (
	podsDir    = "pods"    // pods/<uid>/root, pods/<uid>/volumes/<name>: gone with the pod
	volumesDir = "volumes" // volumes/<namespace>/<kind>/<key>: outlive pods
)

// podDir is everything private to the pod with uid.
func podDir(stateDir, uid string) string {
	return filepath.Join(stateDir, podsDir, uid)
}

// ViewOf returns the view of pod under stateDir: a root private to the pod
// UID, the pod name as hostname, and a mount for every volumeMount of the
// pod's containers whose volume holds files (persistentVolumeClaim, csi,
// hostPath, emptyDir). When two containers mount at one path the first
// wins. Other volume kinds (configMap, secret, projected, ...) are left
// out: their paths are plain directories of the pod's root.
func ViewOf(stateDir string, pod *corev1.Pod) View {
	uid := string(pod.UID)
	view := View{Root: filepath.Join(podDir(stateDir, uid), "root"), Hostname: pod.Name}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	seen := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		for _, vm := range c.VolumeMounts {
			target := path.Clean("/" + vm.MountPath)
			v, ok := volumes[vm.Name]
			if !ok || seen[target] {
				continue
			}
			source := volumeDir(stateDir, pod.Namespace, uid, v)
			if source == "" {
				continue
			}
			seen[target] = true
			m := Mount{Source: source, Target: target}
			if vm.SubPath != "" {
				m.SubPath = strings.TrimPrefix(path.Clean("/"+vm.SubPath), "/")
			}
			view.Mounts = append(view.Mounts, m)
		}
	}
	sort.SliceStable(view.Mounts, func(i, j int) bool {
		return strings.Count(view.Mounts[i].Target, "/") < strings.Count(view.Mounts[j].Target, "/")
	})
	return view
}

// volumeDir is the host directory holding volume v of a pod, "" for a
// volume kind that holds no files of its own.
func volumeDir(stateDir, namespace, uid string, v corev1.Volume) string {
	shared := func(kind, key string) string {
		return filepath.Join(stateDir, volumesDir, namespace, kind, key)
	}
	switch {
	case v.PersistentVolumeClaim != nil:
		return shared("pvc", safeName(v.PersistentVolumeClaim.ClaimName))
	case v.CSI != nil:
		return shared("csi", csiKey(v.CSI))
	case v.HostPath != nil:
		return shared("hostpath", safeName(v.HostPath.Path))
	case v.EmptyDir != nil:
		return filepath.Join(podDir(stateDir, uid), "volumes", safeName(v.Name))
	default:
		return ""
	}
}

// csiKey names an inline CSI volume by its driver and attributes (an inline
// volume has no handle): two pods with the same ones share files.
func csiKey(v *corev1.CSIVolumeSource) string {
	keys := make([]string, 0, len(v.VolumeAttributes))
	for k := range v.VolumeAttributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	h.Write([]byte(v.Driver))
	for _, k := range keys {
		h.Write([]byte{0})
		h.Write([]byte(k + "=" + v.VolumeAttributes[k]))
	}
	return safeName(v.Driver) + "-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// safeName turns s into one path element.
func safeName(s string) string {
	s = strings.Trim(s, "/")
	if s == "" || s == "." || s == ".." {
		return "_" + s
	}
	return strings.ReplaceAll(s, "/", "_")
}
