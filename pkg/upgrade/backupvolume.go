package upgrade

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// A backup outlives the pod only where a volume does: preUpgrade writes it
// from the old pod, postUpgrade reads it in the new one. A walk applied seed
// 000's hooks (backup to /mnt/shared) to sandboxes with no volume there: the
// archive could not be written, the script's last command exited 0, and every
// workspace was lost with the upgrade reported Succeeded. A warning alone did
// not stop the next walk: the selector now pauses such an ops before its
// first sandbox.

// AnnotationBackupOffVolume is the SandboxUpdateOps annotation the selector
// writes, in the same write as spec.paused: true, when it pauses an ops
// before its first sandbox because SelectedBackupOffVolumes finds the hooks'
// paths on no volume that outlives the pod: its value names the paths and
// the sandbox. As AnnotationNoBackup: written once, and resuming the ops is
// how a user says the hooks keep the backup elsewhere; `kubectl molt retry`
// does not copy it.
const AnnotationBackupOffVolume = "molt.dev/backup-off-volume"

// AnnotationBackupOffVolumePausedAt is written with
// AnnotationBackupOffVolume: the ops's metadata.generation once paused by
// that write, and its UID (PausedAtValue).
const AnnotationBackupOffVolumePausedAt = "molt.dev/backup-off-volume-paused-at"

// PausedForBackupOffVolume returns AnnotationBackupOffVolume's value when ops
// is paused by the selector's write of it and not resumed since.
func PausedForBackupOffVolume(ops *agentsv1alpha1.SandboxUpdateOps) (string, bool) {
	return pausedBy(ops, AnnotationBackupOffVolume, AnnotationBackupOffVolumePausedAt)
}

// BackupOffVolumeValue is AnnotationBackupOffVolume's value for the paths
// SelectedBackupOffVolumes found on sandbox name's template.
func BackupOffVolumeValue(name string, paths []string) string {
	return strings.Join(paths, ", ") + " (sandbox " + name + ")"
}

// BackupOffVolumePauseNote is what AnnotationBackupOffVolume's value v means
// to a user reading the ops's condition: why molt paused it, and the ways on.
func BackupOffVolumePauseNote(namespace, name, v string) string {
	return fmt.Sprintf("molt paused this ops before its first sandbox: its backup and restore hooks name %s, on no volume that outlives the pod (a PVC, hostPath, NFS or CSI volume; not an emptyDir) and with no csi runtime: the backup would go with the old pod and every workspace would be lost, with the upgrade still reported Succeeded. "+
		"To keep them: delete this ops, mount persistent storage there (seed 000 needs /mnt/shared: a volume, or runtimes [{name: csi}]), start the scripts with `set -e`, and create it again. "+
		"If the hooks send the backup out of the pod another way, resume it (kubectl patch suo %s -n %s --type merge -p '{\"spec\":{\"paused\":false}}')",
		strings.TrimSpace(v), name, namespace)
}

// absPath finds the absolute paths a hook's command names: a "/" that starts
// a word (or follows = or a quote), up to a space, quote or shell operator.
var absPath = regexp.MustCompile(`(?:^|[\s='"])(/[^\s'";|&<>()]*)`)

// systemDirs hold programs and the system's own files, which a hook names
// without backing anything up there.
var systemDirs = []string{"/bin", "/sbin", "/usr", "/lib", "/lib64", "/dev", "/proc", "/sys", "/etc"}

// HookPaths returns the absolute paths action's command names, outside the
// system's own directories, in order and once each; a path with a shell
// substitution ($…) in it gives its directory.
func HookPaths(action *agentsv1alpha1.UpgradeAction) []string {
	if action == nil || action.Exec == nil {
		return nil
	}
	var out []string
	for _, m := range absPath.FindAllStringSubmatch(strings.Join(action.Exec.Command, "\n"), -1) {
		p := m[1]
		if i := strings.IndexAny(p, "$`{*"); i >= 0 {
			// A name made at run time: its directory is what is known.
			p = strings.TrimRight(p[:strings.LastIndex(p[:i], "/")+1], "/")
		}
		if p == "" || p == "/" || onAny(p, systemDirs) || slices.Contains(out, p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// BackupOffVolumes returns the paths the ops's preUpgrade and postUpgrade name
// when none of them is on a volume of tpl that outlives the pod (a
// PersistentVolumeClaim, a hostPath, NFS, CSI…; not an emptyDir, a configMap,
// a secret, a generic ephemeral volume): a backup written inside the pod goes
// with it, unless the hooks send it out of the pod some other way (object
// storage). nil when the ops lacks either hook, they name no path, or one is
// on such a volume: one of tpl's, or one of sb's volumeClaimTemplates. Also nil
// for a sandbox with the csi runtime, which mounts external storage while
// the sandbox runs (the guides' way: seed 001's /backup is an OSS directory
// mounted so), where the template does not show it.
func BackupOffVolumes(sb *agentsv1alpha1.Sandbox, tpl *corev1.PodTemplateSpec, lc *agentsv1alpha1.SandboxLifecycle) []string {
	if tpl == nil || lc == nil || lc.PreUpgrade == nil || lc.PostUpgrade == nil ||
		slices.ContainsFunc(sb.Spec.Runtimes, func(r agentsv1alpha1.RuntimeConfig) bool { return r.Name == agentsv1alpha1.RuntimeCSI }) {
		return nil
	}
	paths := HookPaths(lc.PreUpgrade)
	for _, p := range HookPaths(lc.PostUpgrade) {
		if !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return nil
	}
	durable := map[string]bool{}
	for _, v := range tpl.Spec.Volumes {
		durable[v.Name] = outlivesPod(v)
	}
	for _, claim := range sb.Spec.VolumeClaimTemplates {
		durable[claim.Name] = true
	}
	var mounts []string
	for _, c := range slices.Concat(tpl.Spec.InitContainers, tpl.Spec.Containers) {
		for _, m := range c.VolumeMounts {
			if durable[m.Name] {
				mounts = append(mounts, strings.TrimRight(m.MountPath, "/"))
			}
		}
	}
	for _, p := range paths {
		// On such a volume, or above one (a relative path from a `cd` there
		// may lead into it).
		if onAny(p, mounts) || slices.ContainsFunc(mounts, func(m string) bool { return onAny(m, []string{p}) }) {
			return nil
		}
	}
	return paths
}

// SelectedBackupOffVolumes is BackupOffVolumes for the ops's hooks on the
// patched template of the first sandbox of sel not started yet, with its
// name; "" and nil when that finds nothing.
func SelectedBackupOffVolumes(ops *agentsv1alpha1.SandboxUpdateOps, sel Selection) (string, []string) {
	if lc := ops.Spec.Lifecycle; lc == nil || lc.PreUpgrade == nil || lc.PostUpgrade == nil {
		return "", nil // no backup and restore pair: no patch applied for nothing on each ops sync
	}
	for _, c := range sel.Candidates {
		tpl := c.Sandbox.Spec.Template
		if c.State != NotStarted || tpl == nil {
			continue
		}
		if patched, err := ApplyPatch(tpl, ops.Spec.Patch.Raw); err == nil {
			tpl = patched
		}
		if paths := BackupOffVolumes(c.Sandbox, tpl, ops.Spec.Lifecycle); len(paths) > 0 {
			return c.Sandbox.Name, paths
		}
		break
	}
	return "", nil
}

// BackupOffVolumesNote says what BackupOffVolumes found for sandbox name.
func BackupOffVolumesNote(name string, paths []string) string {
	return fmt.Sprintf("the preUpgrade and postUpgrade hooks name %s, none of which is on a volume of sandbox %s's template that outlives its pod (a PersistentVolumeClaim, a hostPath, NFS, CSI, a volumeClaimTemplate; an emptyDir goes with the pod), and the sandbox has no csi runtime to mount external storage: a backup written there goes with the old pod, and a script that ends with a command that succeeds (an echo) still exits 0, so the upgrade succeeds with the workspace lost. Mount persistent storage where the backup goes (seed 000's hooks need it at /mnt/shared: a volume, or runtimes [{name: csi}] as the guides say), or send the backup out of the pod; start the scripts with `set -e` so that a failed backup fails the hook",
		strings.Join(paths, ", "), name)
}

// outlivesPod reports whether v's data outlives the pod that mounts it.
func outlivesPod(v corev1.Volume) bool {
	s := v.VolumeSource
	return s.EmptyDir == nil && s.ConfigMap == nil && s.Secret == nil && s.DownwardAPI == nil && s.Projected == nil &&
		s.Ephemeral == nil && s.GitRepo == nil && s.Image == nil
}

// onAny reports whether path is one of dirs or under one.
func onAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}
