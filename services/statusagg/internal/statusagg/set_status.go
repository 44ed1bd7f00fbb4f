package statusagg

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// ConditionTemplateRefused is True on a SandboxSet while a pod from its
// template would not run (the selector's check, upgrade.TemplateRefusal): its
// pool replaces and creates nothing at that revision. A Warning Event of the
// same name says so when it turns True.
const (
	ConditionTemplateRefused = "TemplateRefused"
	// TemplateReasonPodRefused: TemplateRefused=True; the message is the
	// selector's (the cause and what to do).
	TemplateReasonPodRefused = "PodRefused"
	// TemplateReasonAccepted: TemplateRefused=False once a template is
	// accepted again.
	TemplateReasonAccepted = "Accepted"
	// TemplateReasonNoTemplate: TemplateRefused=True; the set has no
	// inline spec.template (only spec.templateRef, which molt does not
	// support): the pool creates, replaces and deletes nothing.
	TemplateReasonNoTemplate = "NoTemplate"
)

// noTemplateMessage is TemplateRefused's message for a set without
// spec.template: what the pool does (nothing), why, and the command that
// sets spec.template.
func noTemplateMessage(set *agentsv1alpha1.SandboxSet) string {
	return agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("the pool creates, replaces and deletes nothing: %s with `kubectl edit sbs %s -n %s`",
		agentsv1alpha1.NoSetTemplateProblem, set.Name, set.Namespace))
}

// ConditionMemberCreateRefused is True on a SandboxSet while the API server
// refuses to create its members (the selector's
// upgrade.AnnotationMemberCreateError): the pool stays short of
// spec.replicas and keeps retrying. A Warning Event of the same name says
// so when it turns True.
const (
	ConditionMemberCreateRefused = "MemberCreateRefused"
	// MemberReasonRefused: MemberCreateRefused=True; the message has the
	// API server's words and what to do.
	MemberReasonRefused = "Refused"
	// MemberReasonCreated: MemberCreateRefused=False once a member is
	// created again, or none is needed.
	MemberReasonCreated = "Created"
)

// memberCreateRefusedMessage is MemberCreateRefused's message for the
// selector's record why.
func memberCreateRefusedMessage(set *agentsv1alpha1.SandboxSet, why string) string {
	return agentsv1alpha1.TruncateConditionMessage(fmt.Sprintf("the API server refuses new members of SandboxSet %s: %s; the pool stays short of spec.replicas and keeps trying: "+
		"fix what refuses them (a ResourceQuota on sandboxes: kubectl describe resourcequota -n %s; an admission webhook; the selector's RBAC)", set.Name, why, set.Namespace))
}

// ConditionMembersFailing is True on a SandboxSet while its pool keeps dead
// members (phase Failed or Succeeded) of its current revision instead of
// replacing them (the selector's upgrade.AnnotationMembersFailing): members
// of that revision died again and again. A Warning Event of the same name
// says so when it turns True.
const (
	ConditionMembersFailing = "MembersFailing"
	// MembersFailingReasonDeadMembersKept: MembersFailing=True; the message
	// names a failed member, what its Ready condition says, and what to do.
	MembersFailingReasonDeadMembersKept = "DeadMembersKept"
	// MembersFailingReasonReplacing: MembersFailing=False once the pool
	// replaces dead members again (the template changed, or the dead
	// members were deleted).
	MembersFailingReasonReplacing = "Replacing"
)

// membersFailingMessage is MembersFailing's message for the selector's
// record why: what the pool does, why, and what to do.
func membersFailingMessage(set *agentsv1alpha1.SandboxSet, revision, why string) string {
	return upgrade.WithNote(
		fmt.Sprintf("members of the current revision (%s) keep dying: %s", revision, why),
		fmt.Sprintf("they are kept, not replaced, and hold the rolling update: fix spec.template with `kubectl edit sbs %s -n %s`; "+
			"changing the template, or deleting the failed members (those of `kubectl get sbx -n %s -l %s=%s,%s=false` whose STATUS is Failed or Succeeded; never a claimed sandbox), resumes replacing them; "+
			"without either, the pool tries 3 more replacements every %s",
			set.Name, set.Namespace, set.Namespace, agentsv1alpha1.LabelSandboxPool, set.Name, agentsv1alpha1.LabelSandboxClaimed, upgrade.DeadMembersRetry))
}

// desiredSetStatus recomputes a SandboxSet's status from its members (the
// sandboxes it controls that are not labelled claimed nor being deleted:
// upgrade.IsPoolMember), recounted at every
// write so that scaling and rolling never leave a counter stale:
//   - replicas: the members (creating and available; claimed ones left);
//   - availableReplicas: members Running;
//   - updateRevision: the hash of spec.template ("" when there is no
//     spec.template to read: the pool has no revision then), updatedReplicas
//     the members labelled with it, updatedAvailableReplicas those of them
//     Running;
//   - selector: the label selector of the unclaimed members, for the scale
//     subresource;
//   - TemplateRefused: True with the selector's message while it refuses
//     the current template, True (NoTemplate) while the set has no
//     spec.template (only spec.templateRef, which molt does not support),
//     False once neither holds;
//   - MemberCreateRefused: True while the selector records a refused
//     member create;
//   - MembersFailing: True while the selector records dead members of the
//     current revision kept (upgrade.MembersFailing), False once it does
//     not.
func desiredSetStatus(set *agentsv1alpha1.SandboxSet, members []*agentsv1alpha1.Sandbox) agentsv1alpha1.SandboxSetStatus {
	st := *set.Status.DeepCopy()
	st.ObservedGeneration = set.Generation
	st.Selector = labels.SelectorFromSet(labels.Set{
		agentsv1alpha1.LabelSandboxClaimed: "false",
		agentsv1alpha1.LabelSandboxPool:    set.Name,
	}).String()
	st.UpdateRevision = ""
	if set.Spec.Template != nil {
		if rev, err := upgrade.Revision(set.Spec.Template); err == nil {
			st.UpdateRevision = rev
		}
	}
	if why := set.Spec.TemplateProblem(); why != "" {
		// The selector cannot even read it: the pool does nothing at all.
		setCondition(&st.Conditions, metav1.Condition{Type: ConditionTemplateRefused, Status: metav1.ConditionTrue,
			Reason: TemplateReasonPodRefused, Message: "the pool creates, replaces and deletes nothing: " + why, ObservedGeneration: set.Generation})
	} else if set.Spec.Template == nil {
		setCondition(&st.Conditions, metav1.Condition{Type: ConditionTemplateRefused, Status: metav1.ConditionTrue,
			Reason: TemplateReasonNoTemplate, Message: noTemplateMessage(set), ObservedGeneration: set.Generation})
	} else if why := upgrade.TemplateRefusal(set, st.UpdateRevision); why != "" && st.UpdateRevision != "" {
		setCondition(&st.Conditions, metav1.Condition{Type: ConditionTemplateRefused, Status: metav1.ConditionTrue,
			Reason: TemplateReasonPodRefused, Message: why, ObservedGeneration: set.Generation})
	} else if meta.FindStatusCondition(st.Conditions, ConditionTemplateRefused) != nil {
		setCondition(&st.Conditions, metav1.Condition{Type: ConditionTemplateRefused, Status: metav1.ConditionFalse,
			Reason: TemplateReasonAccepted, Message: "the current template is accepted", ObservedGeneration: set.Generation})
	}
	if why := set.Annotations[upgrade.AnnotationMemberCreateError]; why != "" {
		setCondition(&st.Conditions, metav1.Condition{Type: ConditionMemberCreateRefused, Status: metav1.ConditionTrue,
			Reason: MemberReasonRefused, Message: memberCreateRefusedMessage(set, why), ObservedGeneration: set.Generation})
	} else if meta.FindStatusCondition(st.Conditions, ConditionMemberCreateRefused) != nil {
		setCondition(&st.Conditions, metav1.Condition{Type: ConditionMemberCreateRefused, Status: metav1.ConditionFalse,
			Reason: MemberReasonCreated, Message: "members are created again, or none is needed", ObservedGeneration: set.Generation})
	}
	if why := upgrade.MembersFailing(set, st.UpdateRevision); why != "" && st.UpdateRevision != "" {
		setCondition(&st.Conditions, metav1.Condition{Type: ConditionMembersFailing, Status: metav1.ConditionTrue,
			Reason: MembersFailingReasonDeadMembersKept, Message: membersFailingMessage(set, st.UpdateRevision, why), ObservedGeneration: set.Generation})
	} else if meta.FindStatusCondition(st.Conditions, ConditionMembersFailing) != nil {
		setCondition(&st.Conditions, metav1.Condition{Type: ConditionMembersFailing, Status: metav1.ConditionFalse,
			Reason: MembersFailingReasonReplacing, Message: "the pool replaces dead members again", ObservedGeneration: set.Generation})
	}
	st.Replicas, st.AvailableReplicas, st.UpdatedReplicas, st.UpdatedAvailableReplicas = 0, 0, 0, 0
	for _, sb := range members {
		running := sb.Status.Phase == agentsv1alpha1.SandboxRunning
		updated := st.UpdateRevision != "" && sb.Labels[agentsv1alpha1.LabelTemplateHash] == st.UpdateRevision
		st.Replicas++
		if running {
			st.AvailableReplicas++
		}
		if updated {
			st.UpdatedReplicas++
			if running {
				st.UpdatedAvailableReplicas++
			}
		}
	}
	return st
}

// syncSet writes one SandboxSet's status when it differs from what its
// members say (one UpdateStatus against the resourceVersion read; a conflict
// retries). Its Progressing condition (setProgress) depends on time too:
// the set is synced again when the next member not available passes the
// progress deadline.
func (s *server) syncSet(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	set, err := s.sets.SandboxSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get SandboxSet %s: %w", key, err)
	}
	all, err := s.sandboxes.Sandboxes(ns).List(labels.SelectorFromSet(labels.Set{agentsv1alpha1.LabelSandboxPool: name}))
	if err != nil {
		return fmt.Errorf("list members of SandboxSet %s: %w", key, err)
	}
	var members []*agentsv1alpha1.Sandbox
	for _, sb := range all {
		if upgrade.IsPoolMember(sb, set) {
			members = append(members, sb)
		}
	}
	want := desiredSetStatus(set, members)
	late, next := lateMembers(members, want.UpdateRevision, s.progressDeadline, time.Now())
	setProgress(&want, set, late, s.progressDeadline)
	if next > 0 {
		// A member passes the deadline then, with nothing else changing.
		s.setCtl.EnqueueAfter(key, next)
	}
	if equality.Semantic.DeepEqual(set.Status, want) {
		return nil
	}
	updated := set.DeepCopy()
	updated.Status = want
	written, err := s.agents.AgentsV1alpha1().SandboxSets(ns).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("update status of SandboxSet %s: %w", key, err)
	}
	for _, cond := range []string{ConditionTemplateRefused, ConditionMemberCreateRefused, ConditionMembersFailing} {
		if c := meta.FindStatusCondition(want.Conditions, cond); c != nil && c.Status == metav1.ConditionTrue &&
			(!meta.IsStatusConditionTrue(set.Status.Conditions, cond) || meta.FindStatusCondition(set.Status.Conditions, cond).Message != c.Message) {
			s.recorder.Event(written, corev1.EventTypeWarning, cond, c.Message)
		}
	}
	if c := meta.FindStatusCondition(want.Conditions, ConditionSetProgressing); c != nil && c.Status == metav1.ConditionFalse &&
		!meta.IsStatusConditionFalse(set.Status.Conditions, ConditionSetProgressing) {
		s.recorder.Event(written, corev1.EventTypeWarning, SetEventMembersNotAvailable, c.Message)
	}
	klog.FromContext(ctx).V(2).Info("Updated SandboxSet status", "sandboxset", klog.KObj(set),
		"replicas", want.Replicas, "available", want.AvailableReplicas, "updated", want.UpdatedReplicas, "revision", want.UpdateRevision)
	return nil
}

// setHandler enqueues a SandboxSet for changes to it and to any sandbox of
// its pool (members, and sandboxes that just left it by being claimed).
func (s *server) setHandler() cache.ResourceEventHandler {
	key := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		switch o := obj.(type) {
		case *agentsv1alpha1.SandboxSet:
			s.setCtl.EnqueueKey(o.Namespace + "/" + o.Name)
		case *agentsv1alpha1.Sandbox:
			if name := o.Labels[agentsv1alpha1.LabelSandboxPool]; name != "" {
				s.setCtl.EnqueueKey(o.Namespace + "/" + name)
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: key, UpdateFunc: func(old, obj any) { key(old); key(obj) }, DeleteFunc: key}
}
