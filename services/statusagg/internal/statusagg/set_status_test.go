package statusagg

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/generated/clientset/versioned/fake"
	listers "molt.dev/pkg/generated/listers/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// TestSetStatusLeavesOutClaimedSandboxes: a sandbox labelled
// sandbox-claimed=true is not counted in its set's status even while the
// set still controls it (a claim written in two steps, or by hand), nor is
// one whose owner reference was removed.
func TestSetStatusLeavesOutClaimedSandboxes(t *testing.T) {
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "ns", UID: "set-uid", Generation: 1}}
	set.Spec.Replicas = 1
	set.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
	owned := []metav1.OwnerReference{*metav1.NewControllerRef(set, agentsv1alpha1.SchemeGroupVersion.WithKind("SandboxSet"))}
	box := func(name, claimed string, refs []metav1.OwnerReference) *agentsv1alpha1.Sandbox {
		sb := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", OwnerReferences: refs, Labels: map[string]string{
			agentsv1alpha1.LabelSandboxPool:    "warm",
			agentsv1alpha1.LabelSandboxClaimed: claimed,
		}}}
		sb.Status.Phase = agentsv1alpha1.SandboxRunning
		return sb
	}
	sets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	sandboxes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	objs := []runtime.Object{set}
	if err := sets.Add(set); err != nil {
		t.Fatal(err)
	}
	for _, sb := range []*agentsv1alpha1.Sandbox{
		box("warm-idle", "false", owned),
		box("warm-labelled", "true", owned), // claimed: label written, owner reference not yet removed
		box("warm-released", "true", nil),   // claimed both ways
	} {
		if err := sandboxes.Add(sb); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, sb)
	}
	client := fake.NewSimpleClientset(objs...)
	s := &server{agents: client, sets: listers.NewSandboxSetLister(sets), sandboxes: listers.NewSandboxLister(sandboxes), recorder: record.NewFakeRecorder(10)}
	ctx := context.Background()
	if err := s.syncSet(ctx, "ns/warm"); err != nil {
		t.Fatal(err)
	}
	got, err := client.AgentsV1alpha1().SandboxSets("ns").Get(ctx, "warm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := got.Status; st.Replicas != 1 || st.AvailableReplicas != 1 || st.UpdatedReplicas != 0 {
		t.Errorf("status replicas %d, available %d, updated %d; want 1, 1, 0 (warm-idle alone)", st.Replicas, st.AvailableReplicas, st.UpdatedReplicas)
	}
}

// The selector's record of a refused member create shows as
// MemberCreateRefused=True with the server's words and what to do, and
// turns False once the record is gone.
func TestSetStatusShowsARefusedMemberCreate(t *testing.T) {
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "ns", Generation: 1,
		Annotations: map[string]string{upgrade.AnnotationMemberCreateError: "exceeded quota: sandboxes, limited: count/sandboxes.agents.kruise.io=10"}}}
	set.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
	st := desiredSetStatus(set, nil)
	c := meta.FindStatusCondition(st.Conditions, ConditionMemberCreateRefused)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "exceeded quota") || !strings.Contains(c.Message, "kubectl describe resourcequota -n ns") {
		t.Fatalf("MemberCreateRefused = %+v, want True with the cause and the next step", c)
	}
	set.Status = st
	delete(set.Annotations, upgrade.AnnotationMemberCreateError)
	if c := meta.FindStatusCondition(desiredSetStatus(set, nil).Conditions, ConditionMemberCreateRefused); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("after the record is gone: MemberCreateRefused = %+v, want False", c)
	}
}

// TestSetStatusWithoutTemplate: a set with only spec.templateRef (molt
// builds members from an inline spec.template alone) shows TemplateRefused
// True, reason NoTemplate, saying templateRef is not supported and how to
// set spec.template; it claims no updateRevision (the one of an earlier
// template is cleared) and so counts no member updated. Setting
// spec.template turns the condition False.
func TestSetStatusWithoutTemplate(t *testing.T) {
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "ns", UID: "set-uid", Generation: 2}}
	set.Spec.Replicas = 1
	set.Spec.TemplateRef = &agentsv1alpha1.SandboxTemplateRef{Name: "agent"}
	set.Status.UpdateRevision = "r1" // written while the set had a template
	member := &agentsv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "warm-abcde", Namespace: "ns", Labels: map[string]string{
		agentsv1alpha1.LabelSandboxPool: "warm", agentsv1alpha1.LabelTemplateHash: "r1",
	}}}
	member.Status.Phase = agentsv1alpha1.SandboxRunning

	st := desiredSetStatus(set, []*agentsv1alpha1.Sandbox{member})
	if st.UpdateRevision != "" || st.UpdatedReplicas != 0 || st.UpdatedAvailableReplicas != 0 {
		t.Errorf("updateRevision %q, updated %d, updatedAvailable %d; want none claimed", st.UpdateRevision, st.UpdatedReplicas, st.UpdatedAvailableReplicas)
	}
	if st.Replicas != 1 || st.AvailableReplicas != 1 {
		t.Errorf("replicas %d, available %d; want the member still counted", st.Replicas, st.AvailableReplicas)
	}
	c := meta.FindStatusCondition(st.Conditions, ConditionTemplateRefused)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != TemplateReasonNoTemplate {
		t.Fatalf("TemplateRefused = %+v, want True, reason %s", c, TemplateReasonNoTemplate)
	}
	for _, want := range []string{"creates, replaces and deletes nothing", "spec.templateRef is not supported", "set spec.template", "kubectl edit sbs warm -n ns"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}

	set.Status = st
	set.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
	st = desiredSetStatus(set, []*agentsv1alpha1.Sandbox{member})
	if c := meta.FindStatusCondition(st.Conditions, ConditionTemplateRefused); c == nil || c.Status != metav1.ConditionFalse || c.Reason != TemplateReasonAccepted {
		t.Errorf("with spec.template: TemplateRefused = %+v, want False", c)
	}
	if st.UpdateRevision == "" {
		t.Error("with spec.template: no updateRevision")
	}
}

// The selector's record of dead members kept shows as MembersFailing=True
// with a failed member's message and what to do, only for the current
// revision, and turns False once the record is gone.
func TestSetStatusShowsDeadMembersKept(t *testing.T) {
	set := &agentsv1alpha1.SandboxSet{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "ns", Generation: 1}}
	set.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img:v1"}}}}
	rev := desiredSetStatus(set, nil).UpdateRevision
	set.Annotations = map[string]string{upgrade.AnnotationMembersFailing: upgrade.MembersFailingValue("older", "warm-a: pod warm-a has failed")}
	if c := meta.FindStatusCondition(desiredSetStatus(set, nil).Conditions, ConditionMembersFailing); c != nil {
		t.Fatalf("an earlier revision's record shows: %+v", c)
	}
	set.Annotations[upgrade.AnnotationMembersFailing] = upgrade.MembersFailingValue(rev, "warm-b: pod warm-b has failed; container sandbox exited with code 1 (Error)")
	st := desiredSetStatus(set, nil)
	c := meta.FindStatusCondition(st.Conditions, ConditionMembersFailing)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != MembersFailingReasonDeadMembersKept {
		t.Fatalf("MembersFailing = %+v, want True, reason %s", c, MembersFailingReasonDeadMembersKept)
	}
	for _, want := range []string{"warm-b: pod warm-b has failed; container sandbox exited with code 1", "kubectl edit sbs warm -n ns",
		"deleting the failed members", "agents.kruise.io/sandbox-pool=warm"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}
	set.Status = st
	delete(set.Annotations, upgrade.AnnotationMembersFailing)
	if c := meta.FindStatusCondition(desiredSetStatus(set, nil).Conditions, ConditionMembersFailing); c == nil || c.Status != metav1.ConditionFalse || c.Reason != MembersFailingReasonReplacing {
		t.Fatalf("after the record is gone: MembersFailing = %+v, want False", c)
	}
}
