package molt

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// The password's source is named, so a refused login says which one was
// sent: the local stack's file in the current directory may be another
// stack's (a walk ran history from a second checkout).
func TestPasswordSaysWhereItCameFrom(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("NATS_PASSWORD", "")
	t.Setenv("KUBECONFIG", "")
	o := natsOptions{user: "viewer"}
	if pw, source, err := o.password(); err != nil || pw != "" || source != "" {
		t.Fatalf("no password anywhere: %q, %q, %v; want none", pw, source, err)
	}
	local := filepath.Join(".molt", "nats-auth", "viewer.password")
	if err := os.MkdirAll(filepath.Dir(local), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(local, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(local)
	if err != nil {
		t.Fatal(err)
	}
	if pw, source, err := o.password(); err != nil || pw != "s3cret" || !strings.Contains(source, "the local stack's file "+abs+" (") {
		t.Errorf("local file: %q, %q, %v", pw, source, err)
	}
	t.Setenv("NATS_PASSWORD", "fromenv")
	if pw, source, _ := o.password(); pw != "fromenv" || source != "$NATS_PASSWORD" {
		t.Errorf("environment: %q, %q", pw, source)
	}
	o.passwordFile = local
	if pw, source, _ := o.password(); pw != "s3cret" || source != "--nats-password-file "+local {
		t.Errorf("flag: %q, %q", pw, source)
	}
}

// The local stack's password is found beside its kubeconfig, so history
// works from any directory once KUBECONFIG points at the stack, as the
// README says to (a walk had to cd to the repository's root); --kubeconfig
// wins over $KUBECONFIG, and either over the current directory's .molt.
func TestPasswordBesideTheKubeconfig(t *testing.T) {
	writePassword := func(dir, pw string) string {
		t.Helper()
		f := filepath.Join(dir, "nats-auth", "viewer.password")
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	stack, other := t.TempDir(), t.TempDir()
	fromStack := writePassword(stack, "stack")
	fromOther := writePassword(other, "other")
	t.Chdir(t.TempDir())
	writePassword(".molt", "cwd")
	t.Setenv("NATS_PASSWORD", "")
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none")+string(os.PathListSeparator)+filepath.Join(stack, "kubeconfig"))

	o := natsOptions{user: "viewer"}
	if pw, source, err := o.password(); err != nil || pw != "stack" || !strings.Contains(source, fromStack) {
		t.Errorf("$KUBECONFIG's second entry: %q, %q, %v; want %s", pw, source, err, fromStack)
	}
	o.kubeconfig = filepath.Join(other, "kubeconfig")
	if pw, source, err := o.password(); err != nil || pw != "other" || !strings.Contains(source, fromOther) {
		t.Errorf("--kubeconfig: %q, %q, %v; want %s", pw, source, err, fromOther)
	}
	o.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if pw, _, err := o.password(); err != nil || pw != "cwd" {
		t.Errorf("no password beside --kubeconfig: %q, %v; want the current directory's", pw, err)
	}
}

// A sandbox with no phase yet is said to have none (a walk saw "phase  is
// not in …" for sandboxes created while statusagg waited for its lease).
func TestWhyOfASandboxWithNoPhaseYet(t *testing.T) {
	ops := &agentsv1alpha1.SandboxUpdateOps{}
	if got := why(upgrade.Exclusion{Reason: upgrade.ExcludedStateFilter}, ops); !strings.HasPrefix(got, "no phase yet") || !strings.Contains(got, "[Running]") {
		t.Errorf("why = %q", got)
	}
	if got := why(upgrade.Exclusion{Reason: upgrade.ExcludedStateFilter, Detail: "Paused"}, ops); got != "phase Paused is not in spec.stateFilter.states [Running]" {
		t.Errorf("why = %q", got)
	}
}

// An ops that selects sandboxes with a direct upgrade policy and hooks of
// their own says that its hooks run in their place (a walk lost a workspace
// after an ops with a postUpgrade alone took a sandbox's preUpgrade away).
func TestOwnHooksReplaced(t *testing.T) {
	hook := &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/sh", "-c", "backup"}}}
	post := &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/sh", "-c", "restore"}}}
	sandbox := func(name string, policy bool, lc *agentsv1alpha1.SandboxLifecycle) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{}
		sb.Name, sb.Spec.Lifecycle = name, lc
		if policy {
			sb.Spec.UpgradePolicy = &agentsv1alpha1.SandboxUpgradePolicy{Type: agentsv1alpha1.UpgradeTypeRecreate}
		}
		return sb
	}
	ops := &agentsv1alpha1.SandboxUpdateOps{}
	ops.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PostUpgrade: post}
	sel := upgrade.Selection{Candidates: []upgrade.Candidate{
		{Sandbox: sandbox("own", true, &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook, PostUpgrade: post})},
		{Sandbox: sandbox("same", true, &agentsv1alpha1.SandboxLifecycle{PostUpgrade: post})},
		{Sandbox: sandbox("no-policy", false, &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook})},
		{Sandbox: sandbox("no-hooks", true, nil)},
		{Sandbox: sandbox("done", true, &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook}), State: upgrade.Updated},
	}}
	if got := ownHooksReplaced(ops, sel); !slices.Equal(got, []string{"own"}) {
		t.Errorf("ownHooksReplaced = %v, want [own]", got)
	}
}

// An ops without a preUpgrade that selects sandboxes with one in
// spec.lifecycle is warned that their hooks do not run (a walk lost three
// workspaces so, expecting the sandboxes' hooks to run).
func TestHooksNotRun(t *testing.T) {
	hook := &agentsv1alpha1.UpgradeAction{Exec: &agentsv1alpha1.ExecAction{Command: []string{"/bin/sh", "-c", "backup"}}}
	sandbox := func(name string, lc *agentsv1alpha1.SandboxLifecycle) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{}
		sb.Name, sb.Spec.Lifecycle = name, lc
		return sb
	}
	failed := func(sb *agentsv1alpha1.Sandbox, reason string) *agentsv1alpha1.Sandbox {
		sb.Status.Conditions = []metav1.Condition{
			{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: "failed-attempt"},
			{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
		}
		return sb
	}
	sel := upgrade.Selection{Candidates: []upgrade.Candidate{
		{Sandbox: sandbox("hooked", &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook})},
		{Sandbox: sandbox("plain", nil)},
		{Sandbox: sandbox("done", &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook}), State: upgrade.Updated},
		{Sandbox: failed(sandbox("post-failed", &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook}), agentsv1alpha1.UpgradingReasonPostUpgradeFailed), Resume: true},
		{Sandbox: failed(sandbox("pre-failed", &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook}), agentsv1alpha1.UpgradingReasonPreUpgradeFailed), Resume: true},
	}}
	// A PostUpgradeFailed sandbox resumed by a postUpgrade-only ops (the
	// guides' way) was backed up by the failed attempt: no warning. One
	// that failed before its backup is backed up by nothing.
	if got := hooksNotRun(&agentsv1alpha1.SandboxUpdateOps{}, sel); !slices.Equal(got, []string{"hooked", "pre-failed"}) {
		t.Errorf("hooksNotRun of an ops without hooks = %v, want [hooked pre-failed]", got)
	}
	// Unless its pod is the original one, which the failed attempt did not
	// replace (its new pod refused): the resume backs that pod up again.
	sel.PodOf = func(sb *agentsv1alpha1.Sandbox) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sb.Name}}
	}
	if got := hooksNotRun(&agentsv1alpha1.SandboxUpdateOps{}, sel); !slices.Equal(got, []string{"hooked", "post-failed", "pre-failed"}) {
		t.Errorf("hooksNotRun with the original pods still there = %v, want [hooked post-failed pre-failed]", got)
	}
	sel.PodOf = func(sb *agentsv1alpha1.Sandbox) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sb.Name, Annotations: map[string]string{upgrade.AnnotationPodAttempt: "failed-attempt"}}}
	}
	if got := hooksNotRun(&agentsv1alpha1.SandboxUpdateOps{}, sel); !slices.Equal(got, []string{"hooked", "pre-failed"}) {
		t.Errorf("hooksNotRun with the pods the failed attempt built = %v, want [hooked pre-failed]", got)
	}
	// A rollback of pre-failed to the template its pod runs keeps that pod:
	// nothing is replaced, so nothing is lost (walk 2: the plan warned and,
	// in the same output, said the pod is kept).
	tpl := func(image string) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}
	}
	original, ok := upgrade.OriginalTemplateValue(tpl("img:v1"))
	if !ok {
		t.Fatal("the template cannot be kept")
	}
	preFailed := sel.Candidates[4].Sandbox
	preFailed.Spec.Template = tpl("img:v2")
	preFailed.Annotations = map[string]string{upgrade.AnnotationOriginalTemplate: original, upgrade.AnnotationOriginalTemplateFor: "failed-attempt"}
	preFailed.Status.Phase = agentsv1alpha1.SandboxUpgrading
	rollback := &agentsv1alpha1.SandboxUpdateOps{}
	rollback.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v1"}]}}`)
	if got := hooksNotRun(rollback, sel); !slices.Equal(got, []string{"hooked", "pre-failed"}) {
		t.Errorf("hooksNotRun of a rollback whose pod is not Ready (replaced) = %v, want [hooked pre-failed]", got)
	}
	sel.PodOf = func(sb *agentsv1alpha1.Sandbox) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sb.Name, Annotations: map[string]string{upgrade.AnnotationPodAttempt: "failed-attempt"}},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	if got := hooksNotRun(rollback, sel); !slices.Equal(got, []string{"hooked"}) {
		t.Errorf("hooksNotRun of a rollback that keeps its Ready pod = %v, want [hooked]", got)
	}
	forward := &agentsv1alpha1.SandboxUpdateOps{}
	forward.Spec.Patch.Raw = []byte(`{"spec":{"containers":[{"name":"sandbox","image":"img:v3"}]}}`)
	if got := hooksNotRun(forward, sel); !slices.Equal(got, []string{"hooked", "pre-failed"}) {
		t.Errorf("hooksNotRun of an ops to another image = %v, want [hooked pre-failed]", got)
	}
	withHooks := &agentsv1alpha1.SandboxUpdateOps{}
	withHooks.Spec.Lifecycle = &agentsv1alpha1.SandboxLifecycle{PreUpgrade: hook}
	if got := hooksNotRun(withHooks, sel); len(got) != 0 {
		t.Errorf("hooksNotRun of an ops with a preUpgrade = %v, want none", got)
	}
}
