package upgrade

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

func TestBackupOffVolumes(t *testing.T) {
	hook := func(script string) *agentsv1alpha1.UpgradeAction {
		return &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/bash", "-c", script}}}
	}
	// Seed 000's hooks, and seed 001's.
	seed000 := &agentsv1alpha1.SandboxLifecycle{
		PreUpgrade:  hook("tar czf /mnt/shared/backup-$(hostname).tar.gz -C /home/user/workspace .\necho \"Backup completed\""),
		PostUpgrade: hook("if [ -f /mnt/shared/backup-$(hostname).tar.gz ]; then\n  tar xzf /mnt/shared/backup-$(hostname).tar.gz -C /home/user/workspace\nfi"),
	}
	seed001 := &agentsv1alpha1.SandboxLifecycle{
		PreUpgrade:  hook("set -e\ncd /root/\ntar -czf openclaw-state-v1.tgz .openclaw\nmv openclaw-state-v1.tgz /backup"),
		PostUpgrade: hook("set -e\nrm -rf /root/.openclaw\ncp /backup/openclaw-state-v1.tgz /root/openclaw-state-v1.tgz\ntar -xzvf /root/openclaw-state-v1.tgz -C /root"),
	}
	tpl := func(mounts map[string]corev1.VolumeSource) *corev1.PodTemplateSpec {
		t := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox"}}}}
		for path, src := range mounts {
			name := strings.ReplaceAll(strings.Trim(path, "/"), "/", "-")
			t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: src})
			t.Spec.Containers[0].VolumeMounts = append(t.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path})
		}
		return t
	}
	withClaim := func(name string) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{}
		sb.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: name}}}
		return sb
	}
	mountOnly := func(path, name string) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", VolumeMounts: []corev1.VolumeMount{{Name: name, MountPath: path}}}}}}
	}
	empty := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	pvc := corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}
	host := corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}
	for _, tc := range []struct {
		name string
		sb   *agentsv1alpha1.Sandbox
		tpl  *corev1.PodTemplateSpec
		lc   *agentsv1alpha1.SandboxLifecycle
		want []string
	}{
		{"seed 000 without /mnt/shared (the walk's)", nil, tpl(map[string]corev1.VolumeSource{"/home/user/workspace": empty}), seed000,
			[]string{"/mnt/shared", "/home/user/workspace"}},
		{"seed 000 with a persistent /mnt/shared", nil, tpl(map[string]corev1.VolumeSource{"/mnt/shared": host, "/home/user/workspace": empty}), seed000, nil},
		{"seed 001 with a persistent /backup", nil, tpl(map[string]corev1.VolumeSource{"/backup": pvc}), seed001, nil},
		{"seed 001 with no volume", nil, tpl(nil), seed001, []string{"/root/", "/backup", "/root/.openclaw", "/backup/openclaw-state-v1.tgz", "/root/openclaw-state-v1.tgz", "/root"}},
		{"a persistent volume under a path the hooks name", nil, tpl(map[string]corev1.VolumeSource{"/root/keep": pvc}), &agentsv1alpha1.SandboxLifecycle{
			PreUpgrade: hook("cd /root && tar czf keep/ws.tgz ws"), PostUpgrade: hook("cd /root && tar xzf keep/ws.tgz")}, nil},
		{"seed 000 on a sandbox with the csi runtime (the guides' external storage)", &agentsv1alpha1.Sandbox{Spec: agentsv1alpha1.SandboxSpec{
			Runtimes: []agentsv1alpha1.RuntimeConfig{{Name: "agent-runtime"}, {Name: agentsv1alpha1.RuntimeCSI}}}},
			tpl(map[string]corev1.VolumeSource{"/home/user/workspace": empty}), seed000, nil},
		{"seed 001 with /backup from a volumeClaimTemplate", withClaim("backup"), mountOnly("/backup", "backup"), seed001, nil},
		{"no preUpgrade", nil, tpl(nil), &agentsv1alpha1.SandboxLifecycle{PostUpgrade: seed000.PostUpgrade}, nil},
		{"hooks that name no path", nil, tpl(nil), &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook("backup-to-s3"), PostUpgrade: hook("restore-from-s3")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := tc.sb
			if sb == nil {
				sb = &agentsv1alpha1.Sandbox{}
			}
			if got := BackupOffVolumes(sb, tc.tpl, tc.lc); !slices.Equal(got, tc.want) {
				t.Errorf("BackupOffVolumes = %q, want %q", got, tc.want)
			}
		})
	}
}
