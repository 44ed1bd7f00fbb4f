package patcher

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"molt.dev/dev/testenv"
	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/events"
	versioned "molt.dev/pkg/generated/clientset/versioned"
	"molt.dev/pkg/service"
	"molt.dev/pkg/upgrade"
)

const (
	oldImage    = "registry.example/sandbox:v1"
	deniedImage = "registry.example/sandbox:denied"
	// policyWords is what the test's admission policy answers.
	policyWords = "image registry.example/sandbox:denied is not allowed in this namespace"
)

// denyImage makes the API server refuse, in ns, any write of a sandbox whose
// template runs deniedImage, answering with reason ("" for a
// ValidatingAdmissionPolicy's default, Forbidden).
func denyImage(t *testing.T, ns string, reason metav1.StatusReason, probe string) {
	t.Helper()
	env := testenv.Get(t)
	env.Refuse(t, ns, testenv.Refusal{
		Group: agentsv1alpha1.SchemeGroupVersion.Group, Resource: "sandboxes",
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Allow:      fmt.Sprintf("!has(object.spec.template) || object.spec.template.spec.containers.all(c, c.image != '%s')", deniedImage),
		Message:    policyWords,
		Reason:     reason,
	}, func(ctx context.Context) error {
		patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":%q}]}}}}`, deniedImage)
		_, err := client(t).AgentsV1alpha1().Sandboxes(ns).Patch(ctx, probe, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if want := cmp.Or(reason, metav1.StatusReasonForbidden); err != nil && apierrors.ReasonForError(err) != want {
			return fmt.Errorf("the probe was refused for %s, want %s: %w", apierrors.ReasonForError(err), want, err)
		}
		return err
	})
}

func client(t *testing.T) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(testenv.Get(t).RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// claimed creates an ops whose patch sets deniedImage and a sandbox running
// oldImage that the ops claims, as the selector leaves it before it
// publishes `requested`.
// Each of opts may change the ops before it is created.
func claimed(t *testing.T, ns, name string, opts ...func(*agentsv1alpha1.SandboxUpdateOps)) (*agentsv1alpha1.SandboxUpdateOps, *agentsv1alpha1.Sandbox) {
	t.Helper()
	ctx := context.Background()
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: ns}}
	ops.Spec.Selector = &metav1.LabelSelector{}
	ops.Spec.Patch = runtime.RawExtension{Raw: []byte(fmt.Sprintf(`{"spec":{"containers":[{"name":"sandbox","image":%q}]}}`, deniedImage))}
	for _, opt := range opts {
		opt(ops)
	}
	ops, err := client(t).AgentsV1alpha1().SandboxUpdateOps(ns).Create(ctx, ops, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ops: %v", err)
	}
	sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels:      map[string]string{agentsv1alpha1.LabelUpdateOps: ops.Name},
		Annotations: map[string]string{upgrade.AnnotationClaim: upgrade.ClaimValue(ops.Name, string(ops.UID))}}}
	sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: oldImage}}}}
	if sb, err = client(t).AgentsV1alpha1().Sandboxes(ns).Create(ctx, sb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	return ops, sb
}

var (
	patcherOnce sync.Once
	patcherErr  = make(chan error, 1)
)

// startPatcher runs patcher.Run in-process against the harness, once for the
// package.
func startPatcher(t *testing.T) {
	t.Helper()
	env := testenv.Get(t)
	patcherOnce.Do(func() {
		cfg := Config{
			Options: service.Options{
				Name: "patcher", Kubeconfig: env.Kubeconfig, NATSURL: env.NATSURL, NATSAuth: env.NATSAuth("patcher"), HTTPAddr: "127.0.0.1:0",
				KubeQPS: 100, KubeBurst: 200, ShutdownTimeout: 5 * time.Second,
			},
			Workers:         4,
			PodReadyTimeout: time.Minute,
		}
		go func() { patcherErr <- Run(context.Background(), cfg) }()
	})
	t.Cleanup(func() {
		select {
		case err := <-patcherErr:
			patcherErr <- err
			t.Errorf("patcher.Run returned while tests run: %v", err)
		default:
		}
	})
}

// request publishes `requested` for sb as the selector does, and returns
// the sandbox's `failed` events from then on.
func request(t *testing.T, ops *agentsv1alpha1.SandboxUpdateOps, sb *agentsv1alpha1.Sandbox, mods ...func(*events.Data)) <-chan events.Event {
	t.Helper()
	nc := testenv.Get(t).NATSConnect(t, "", "admin")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(context.Background(), js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	failed := make(chan events.Event, 16)
	sub, err := nc.Subscribe(events.SandboxSubject(sb.Namespace, sb.Name, events.TokenFailed), func(m *nats.Msg) {
		ev, err := events.Decode(m.Data)
		if err != nil {
			t.Errorf("decode event on %s: %v", m.Subject, err)
			return
		}
		failed <- ev
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js, "selector", nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := events.Event{Type: events.TypeRequested, Data: events.Data{
		Ops:     events.OpsRef{Name: ops.Name, UID: ops.UID},
		Sandbox: events.SandboxRef{Namespace: sb.Namespace, Name: sb.Name, UID: sb.UID},
		Attempt: string(ops.UID),

		SandboxResourceVersion: sb.ResourceVersion,
	}}
	for _, mod := range mods {
		mod(&ev.Data)
	}
	if err := pub.Publish(context.Background(), ev); err != nil {
		t.Fatalf("publish requested: %v", err)
	}
	return failed
}

// A spec write that an admission policy refuses fails the sandbox's
// PreUpgrade at once with the policy's words and what to do, and changes
// nothing. Before, the patcher left it to redeliveries (1 s, 30 s, 90 s,
// 210 s apart), and the watchdog failed the sandbox after minutes with "the
// patcher and hookrunner did not report the patch ... check their logs".
func TestRefusedSpecWriteFailsPreUpgradeAtOnce(t *testing.T) {
	startPatcher(t)
	for _, tc := range []struct {
		name   string
		reason metav1.StatusReason
	}{
		{"the policy answers Forbidden (its default)", ""},
		{"the policy answers Invalid, as a failed test of the patch does", metav1.StatusReasonInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testenv.Get(t).Namespace(t)
			ops, sb := claimed(t, ns, "sbx-refused")
			denyImage(t, ns, tc.reason, sb.Name)
			start := time.Now()
			failed := request(t, ops, sb)

			var ev events.Event
			select {
			case ev = <-failed:
			case <-time.After(20 * time.Second):
				t.Fatalf("no failed event within 20s of requested (redeliveries come 30s and more apart; the watchdog fails the sandbox after ~2m)")
			}
			t.Logf("failed after %s: %s", time.Since(start).Round(time.Millisecond), ev.Data.Message)
			if ev.Data.Stage != agentsv1alpha1.UpgradingReasonPreUpgrade || ev.Data.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed || ev.Data.Attempt != string(ops.UID) {
				t.Errorf("failed stage/reason/attempt = %s/%s/%s, want PreUpgrade/PreUpgradeFailed/%s", ev.Data.Stage, ev.Data.Reason, ev.Data.Attempt, ops.UID)
			}
			for _, want := range []string{
				"the API server refused the patched template of sandbox " + ns + "/" + sb.Name,
				policyWords,
				"the old pod was not touched",
				"then create a new SandboxUpdateOps",
			} {
				if !strings.Contains(ev.Data.Message, want) {
					t.Errorf("message %q lacks %q", ev.Data.Message, want)
				}
			}
			now, err := client(t).AgentsV1alpha1().Sandboxes(ns).Get(context.Background(), sb.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if image := now.Spec.Template.Spec.Containers[0].Image; image != oldImage || now.Generation != sb.Generation {
				t.Errorf("sandbox template image %s at generation %d, want %s unchanged at %d", image, now.Generation, oldImage, sb.Generation)
			}
		})
	}
}

// A paused sandbox woken for its upgrade that has no spec.template (only a
// templateRef, which molt cannot build a pod from) fails PreUpgrade at once,
// saying so: no pod can be built to wake it, and before, the wake-up waited
// out its whole deadline and blamed the pod ("no pod was created for it
// yet").
func TestWokenSandboxWithoutTemplateFailsAtOnce(t *testing.T) {
	startPatcher(t)
	ctx := context.Background()
	ns := testenv.Get(t).Namespace(t)
	ops, sb := claimed(t, ns, "sbx-ref")
	sb.Spec.Template = nil
	sb.Spec.TemplateRef = &agentsv1alpha1.SandboxTemplateRef{Name: "agent"}
	sb.Spec.Paused = true
	sb.Annotations[agentsv1alpha1.AnnotationUpgradeResumeTrigger] = "true"
	sb, err := client(t).AgentsV1alpha1().Sandboxes(ns).Update(ctx, sb, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	failed := request(t, ops, sb)
	select {
	case ev := <-failed:
		if ev.Data.Reason != agentsv1alpha1.UpgradingReasonPreUpgradeFailed || !strings.Contains(ev.Data.Message, agentsv1alpha1.NoTemplateProblem) {
			t.Errorf("failed %s: %q, want PreUpgradeFailed saying the sandbox has no spec.template", ev.Data.Reason, ev.Data.Message)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no failed event within 20s of requested (the wake-up's deadline is a minute here)")
	}
}

// A failed test of the spec write's JSON patch is Invalid too, but it means
// the sandbox moved on since read: it is retried (the retry reads the
// sandbox again), never filed as the API server refusing the template, even
// while a policy would refuse the template as well. Only a sandbox still as
// read makes an Invalid a refusal; so with RBAC, which answers before the
// tests are run.
func TestSpecWriteRefusalOnlyOfTheSandboxAsRead(t *testing.T) {
	ctx := context.Background()
	template := func(image string) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}
	}
	deny := func(t *testing.T, ns, probe string) { denyImage(t, ns, metav1.StatusReasonInvalid, probe) }
	noPolicy := func(*testing.T, string, string) {}
	for _, tc := range []struct {
		name    string
		refuse  func(t *testing.T, ns, probe string)
		rbac    bool // write as a user who may read sandboxes but not patch them
		meddle  func(t *testing.T, sb *agentsv1alpha1.Sandbox)
		refused string // in the words returned; "" wants an error for a retry
	}{
		{name: "as read, refused by a policy", refuse: deny, refused: policyWords},
		{name: "as read, refused by RBAC", refuse: noPolicy, rbac: true, refused: `cannot patch resource "sandboxes"`},
		{name: "spec changed since read", refuse: deny, meddle: func(t *testing.T, sb *agentsv1alpha1.Sandbox) {
			patch := `{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":"registry.example/sandbox:v1","env":[{"name":"EDITED","value":"1"}]}]}}}}`
			if _, err := client(t).AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "released: the ops was deleted", refuse: deny, meddle: release},
		{name: "released, and RBAC refuses", refuse: noPolicy, rbac: true, meddle: release},
		{name: "claimed again by an ops of the same name", refuse: deny, meddle: func(t *testing.T, sb *agentsv1alpha1.Sandbox) {
			release(t, sb)
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"up"},"annotations":{%q:%q}}}`, agentsv1alpha1.LabelUpdateOps, upgrade.AnnotationClaim, upgrade.ClaimValue("up", "uid-of-the-new-ops"))
			if _, err := client(t).AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "deleted and created again", refuse: deny, meddle: func(t *testing.T, sb *agentsv1alpha1.Sandbox) {
			sandboxes := client(t).AgentsV1alpha1().Sandboxes(sb.Namespace)
			if err := sandboxes.Delete(ctx, sb.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			again := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: sb.Name, Namespace: sb.Namespace, Labels: sb.Labels, Annotations: sb.Annotations}, Spec: sb.Spec}
			testenv.Eventually(t, 30*time.Second, "the sandbox created again", func() (bool, error) {
				_, err := sandboxes.Create(ctx, again, metav1.CreateOptions{})
				return err == nil, err
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testenv.Get(t).Namespace(t)
			ops, sb := claimed(t, ns, "sbx")
			tc.refuse(t, ns, sb.Name)
			if tc.meddle != nil {
				tc.meddle(t, sb)
			}
			writer := client(t)
			if tc.rbac {
				writer = readOnly(t, ns)
			}
			p := &Patcher{agents: writer}
			written, refused, _, err := p.writeSpec(ctx, sb, ops, template(deniedImage), false, string(ops.UID), true)
			t.Logf("writeSpec = %q, %q, %v", written, refused, err)
			switch {
			case written != "":
				t.Fatalf("the template was written")
			case tc.refused != "" && (err != nil || !strings.Contains(refused, tc.refused)):
				t.Fatalf("writeSpec refused %q, err %v; want the API server's words %q", refused, err, tc.refused)
			case tc.refused == "" && (err == nil || refused != ""):
				t.Fatalf("writeSpec refused %q, err %v; want an error for a retry, not a refusal", refused, err)
			}
		})
	}
}

// release removes the ops's label and claim, as the selector does when the
// ops is deleted.
func release(t *testing.T, sb *agentsv1alpha1.Sandbox) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{agentsv1alpha1.LabelUpdateOps: nil},
		"annotations": map[string]any{upgrade.AnnotationClaim: nil},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client(t).AgentsV1alpha1().Sandboxes(sb.Namespace).Patch(context.Background(), sb.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// readOnly is a client of a user who may read the sandboxes of ns but not
// write them.
func readOnly(t *testing.T, ns string) versioned.Interface {
	t.Helper()
	ctx := context.Background()
	env := testenv.Get(t)
	user := "reader-" + ns
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-reader", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{agentsv1alpha1.SchemeGroupVersion.Group}, Resources: []string{"sandboxes"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := env.Kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-reader", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if _, err := env.Kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.RestConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "RBAC to let "+user+" read sandboxes", func() (bool, error) {
		_, err := c.AgentsV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	return c
}
