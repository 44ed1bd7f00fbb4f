package patcher

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/generated/clientset/versioned/fake"
	"molt.dev/pkg/upgrade"
)

// The spec write lands only on a sandbox still claimed as it was read: an
// ops deleted meanwhile releases the sandbox (label and claim removed), and
// a template patched after that would never be rolled out.
func TestSpecWriteNeedsTheClaimAsRead(t *testing.T) {
	template := func(image string) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}
	}
	ops := &agentsv1alpha1.SandboxUpdateOps{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "ns", UID: "uid-1"}}
	read := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sbx", Namespace: "ns", UID: "sb-uid", Generation: 1,
		Labels:      map[string]string{agentsv1alpha1.LabelUpdateOps: "up"},
		Annotations: map[string]string{upgrade.AnnotationClaim: upgrade.ClaimValue("up", "uid-1")}}}
	read.Spec.Template = template("v1")

	for _, tc := range []struct {
		name    string
		now     func(*agentsv1alpha1.Sandbox)
		written bool
	}{
		{"still claimed", func(*agentsv1alpha1.Sandbox) {}, true},
		{"released", func(sb *agentsv1alpha1.Sandbox) { sb.Labels, sb.Annotations = nil, nil }, false},
		{"a sandbox of the same name created since", func(sb *agentsv1alpha1.Sandbox) { sb.UID = "another-sandbox" }, false},
		{"claimed by the ops applied again under the same name", func(sb *agentsv1alpha1.Sandbox) {
			sb.Annotations[upgrade.AnnotationClaim] = upgrade.ClaimValue("up", "uid-2")
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored := read.DeepCopy()
			tc.now(stored)
			client := fake.NewSimpleClientset()
			// Created, not seeded: the tracker would file a seeded Sandbox
			// under the resource "sandboxs".
			if _, err := client.AgentsV1alpha1().Sandboxes("ns").Create(context.Background(), stored, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			p := &Patcher{agents: client}
			_, _, _, err := p.writeSpec(context.Background(), read, ops, template("v2"), false, "uid-1", true)
			got, gerr := client.AgentsV1alpha1().Sandboxes("ns").Get(context.Background(), "sbx", metav1.GetOptions{})
			if gerr != nil {
				t.Fatal(gerr)
			}
			image := got.Spec.Template.Spec.Containers[0].Image
			if tc.written && (err != nil || image != "v2") {
				t.Fatalf("write: err %v, image %s; want v2 written", err, image)
			}
			if original, ok := upgrade.OriginalTemplate(withAttempt(got, "uid-1", agentsv1alpha1.UpgradingReasonPreUpgrade)); tc.written &&
				(!ok || original.Spec.Containers[0].Image != "v1") {
				t.Fatalf("original template %v (kept: %v); want v1 kept for attempt uid-1 in the same write", original, ok)
			}
			if !tc.written && (err == nil || image != "v1") {
				t.Fatalf("write: err %v, image %s; want it refused and v1 kept", err, image)
			}
		})
	}
}

// withAttempt returns a copy of sb whose status shows attempt in reason, as
// statusagg records it.
func withAttempt(sb *agentsv1alpha1.Sandbox, attempt, reason string) *agentsv1alpha1.Sandbox {
	sb = sb.DeepCopy()
	sb.Status.Conditions = []metav1.Condition{
		{Type: upgrade.ConditionAttempt, Status: metav1.ConditionTrue, Reason: reason, Message: attempt},
		{Type: agentsv1alpha1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: reason},
	}
	return sb
}
