package upgrade

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"molt.dev/pkg/agentruntime"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

func TestWithNoteKeepsTheNextStep(t *testing.T) {
	note := CheckpointKeptNote("team-a", "box-0", "ckpt-123")
	long := strings.Repeat("container main: CrashLoopBackOff - back-off restarting failed container ", 30)
	got := WithNote(long, note)
	if len(got) > agentsv1alpha1.MaxConditionMessageLength || !strings.HasSuffix(got, "; "+note) || !strings.HasPrefix(got, "container main: CrashLoopBackOff") {
		t.Errorf("WithNote = %q (%d bytes): want the cause cut, then the whole note, within %d bytes", got, len(got), agentsv1alpha1.MaxConditionMessageLength)
	}
	if got := WithNote("short cause", note); got != "short cause; "+note {
		t.Errorf("WithNote = %q", got)
	}
	// A hook's failure with a long stderr (a walk's 3000 lines): its last
	// lines, where the cause is, survive the note; the middle goes.
	var stderr strings.Builder
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&stderr, "line %d ünïcødé 🚀\n", i)
	}
	failure := agentruntime.Result{Exited: true, ExitCode: 3, Stderr: stderr.String()}.FailureMessage()
	got = WithNote(failure, note)
	if len(got) > agentsv1alpha1.MaxConditionMessageLength || !utf8.ValidString(got) || !strings.HasPrefix(got, "hook failed with exit code 3, stderr: …") ||
		!strings.Contains(got, "line 3000 ünïcødé 🚀, stdout: ; "+note) {
		t.Errorf("WithNote(hook failure) = %q (%d bytes): want its head, stderr's last line and the whole note, within %d bytes", got, len(got), agentsv1alpha1.MaxConditionMessageLength)
	}
	if !strings.Contains(note, "kubectl get cp -n team-a -l molt.dev/sandbox=box-0") {
		t.Errorf("note %q does not say how to find the checkpoint", note)
	}
}

func TestChangedImages(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "setup", Image: "tools:v1"}},
		Containers:     []corev1.Container{{Name: "sandbox", Image: "app:v1"}, {Name: "sidecar", Image: "proxy:v1"}},
	}}
	tpl := &corev1.PodTemplateSpec{Spec: *pod.Spec.DeepCopy()}
	if got := ChangedImages(pod, tpl); got != nil {
		t.Fatalf("same template: %v", got)
	}
	tpl.Spec.Containers[0].Image = "app:v2"
	tpl.Spec.InitContainers[0].Image = "tools:v2"
	tpl.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "A", Value: "b"}}
	tpl.Spec.Containers = append(tpl.Spec.Containers, corev1.Container{Name: "new", Image: "extra:v1"})
	want := []string{"initContainer setup: tools:v1 → tools:v2", "container sandbox: app:v1 → app:v2"}
	if got := ChangedImages(pod, tpl); !slices.Equal(got, want) {
		t.Fatalf("ChangedImages = %q, want %q", got, want)
	}
	if ChangedImages(nil, tpl) != nil {
		t.Fatal("no pod: nothing to compare")
	}
}

// Two sandboxes whose long names differ only at the end (a pool's members) get
// their own Checkpoint for one attempt; every name is a valid object name.
func TestCheckpointNameKeepsLongNamesApart(t *testing.T) {
	a := CheckpointName("python-code-interpreter-sandbox-pool-v2-x7k2p", "ops-uid")
	b := CheckpointName("python-code-interpreter-sandbox-pool-v2-q9zzt", "ops-uid")
	if a == b {
		t.Fatalf("both sandboxes get checkpoint %q", a)
	}
	if short := CheckpointName("box-1", "ops-uid"); short != "box-1-ckpt-"+AttemptHash("ops-uid") {
		t.Fatalf("CheckpointName(box-1) = %q, want the sandbox name kept whole", short)
	}
	for _, name := range []string{a, b, CheckpointName(strings.Repeat("a", 32)+"-"+strings.Repeat("b", 200), "x")} {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > 63 {
			t.Errorf("checkpoint name %q (%d characters): %v", name, len(name), errs)
		}
	}
}

// The same image written another way is not a change of image; another tag,
// repository or registry is.
func TestSameImage(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"nginx", "docker.io/library/nginx:latest", true},
		{"nginx:1.25", "index.docker.io/library/nginx:1.25", true},
		{"my-registry/sandbox-image:v1", "docker.io/my-registry/sandbox-image:v1", true},
		{"ghcr.io/openclaw/openclaw:v1", "ghcr.io/openclaw/openclaw:v1@sha256:0123abcd", true},
		{"registry.example:5000/app:v1", "registry.example:5000/app:v1", true},
		{"app@sha256:aaaa", "app:v1", true}, // cannot tell: not refused
		{"nginx:1.25", "nginx:1.26", false},
		{"nginx", "nginx:1.26", false},
		{"my-registry/sandbox-image:v1", "other-registry/sandbox-image:v1", false},
		{"ghcr.io/a/app:v1", "quay.io/a/app:v1", false},
		{"app@sha256:aaaa", "app@sha256:bbbb", false},
		{"registry.example:5000/app:v1", "registry.example:5000/app:v2", false},
	} {
		if got := SameImage(tc.a, tc.b); got != tc.same {
			t.Errorf("SameImage(%q, %q) = %t, want %t", tc.a, tc.b, got, tc.same)
		}
	}
}

// TestOnlyRecreateResumes: under CheckpointRestore, the failed sandboxes whose
// failure says only a Recreate resumes them are named, sorted; the others,
// and every one under Recreate, are not.
func TestOnlyRecreateResumes(t *testing.T) {
	failed := map[string]string{
		"b": "checkpoint b-ckpt of pod b failed: store offline; podcycler did not delete the old pod: ...; the sandbox is paused, ...: resume it with a SandboxUpdateOps of updateStrategy.type Recreate (...)",
		"a": "sandbox ns/a has no running pod to checkpoint and no checkpoint of this attempt succeeded; its files are gone with its pod: upgrade it with updateStrategy.type Recreate",
		"c": "checkpoint c-ckpt of pod c failed: disk full; podcycler did not delete the old pod: fix the checkpointer's cause, then create a new SandboxUpdateOps (it takes a new checkpoint)",
	}
	if got := OnlyRecreateResumes(agentsv1alpha1.UpgradeTypeCheckpointRestore, failed); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("under CheckpointRestore: %v, want [a b]", got)
	}
	if got := OnlyRecreateResumes(agentsv1alpha1.UpgradeTypeRecreate, failed); got != nil {
		t.Errorf("under Recreate: %v, want none (a Recreate resumes them)", got)
	}
}
