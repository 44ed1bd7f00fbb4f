package upgrade

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// The patcher writes an ops's patch into spec.template while the attempt is
// in PreUpgrade, before preUpgrade has backed up the pod that runs the
// template as it was. Until a preUpgrade succeeds, a pod created for the
// sandbox outside UpgradePod (a paused sandbox woken again to resume,
// a sandbox unpaused by hand, a pod someone deleted) must be built from the
// template as it was: a pod of the patched template would start on the
// sandbox's volumes before their backup, and the resume would take it for
// a pod of the new revision (API.md: a preUpgrade failure leaves the old pod
// untouched; DESIGN.md rule 9: a backup is never skipped because something
// before it failed).
//
// The two annotations below keep that template for as long as it is needed
// (OriginalTemplate says when):
//   - the patcher writes both, in the same write as the patch, for an
//     attempt that continues no failed one (the template it replaces is the
//     one the pods ran);
//   - the selector, in the patch that admits a sandbox, moves
//     AnnotationOriginalTemplateFor to the new attempt when the one it
//     resumes failed before its backup and the record still holds (a chain
//     of such failures never backed the workspace up), and otherwise
//     removes both.
//
// Read by podcycler (the pods it creates outside UpgradePod), the selector
// (whether a paused resume is woken) and the patcher (what a failed wake-up
// says).
const (
	// AnnotationOriginalTemplate is the Sandbox annotation holding, as JSON,
	// the spec.template the sandbox had before the patch of the attempt
	// that AnnotationOriginalTemplateFor names.
	AnnotationOriginalTemplate = "molt.dev/original-template"
	// AnnotationOriginalTemplateFor is the Sandbox annotation naming the
	// attempt that AnnotationOriginalTemplate is kept for.
	AnnotationOriginalTemplateFor = "molt.dev/original-template-for"
)

// MaxOriginalTemplate bounds AnnotationOriginalTemplate (the API server
// refuses an object whose annotations pass 256 KiB in all). A template
// larger than this is not kept: its pods are built from spec.template, as
// before molt kept one.
const MaxOriginalTemplate = 64 << 10

// BeforeBackup reports whether an attempt whose status shows reason has not
// had its preUpgrade succeed: it is waking the sandbox, in PreUpgrade, or
// failed there (the stage table files the patch and the wake-up there too).
func BeforeBackup(reason string) bool {
	r := Rank(reason)
	return r > 0 && r <= Rank(agentsv1alpha1.UpgradingReasonPreUpgrade)
}

// OriginalTemplate returns the template sb's pods must be built from, outside
// UpgradePod, instead of spec.template: the one AnnotationOriginalTemplate
// keeps, while the attempt it is kept for (AnnotationOriginalTemplateFor) has
// not had a preUpgrade succeed. That attempt is
//   - the one sb's status shows, in a stage or failed before its backup
//     (BeforeBackup);
//   - or one admitted that the status does not show yet that resumes the
//     failed attempt the status shows, which failed in PreUpgrade (its
//     AnnotationResumes says so; it stays after the ops is released).
//
// ok is false otherwise, and when the annotation is missing or unreadable.
func OriginalTemplate(sb *agentsv1alpha1.Sandbox) (tpl *corev1.PodTemplateSpec, ok bool) {
	key := sb.Annotations[AnnotationOriginalTemplateFor]
	raw, has := sb.Annotations[AnnotationOriginalTemplate]
	if key == "" || !has || !originalHolds(sb, key) {
		return nil, false
	}
	tpl = &corev1.PodTemplateSpec{}
	if err := json.Unmarshal([]byte(raw), tpl); err != nil {
		return nil, false
	}
	return tpl, true
}

// originalHolds is OriginalTemplate's rule for the attempt key.
func originalHolds(sb *agentsv1alpha1.Sandbox, key string) bool {
	cur := CurrentAttempt(sb)
	reason, recorded := ReasonFor(sb, cur)
	if key == cur {
		return recorded && BeforeBackup(reason)
	}
	if _, shown := ReasonFor(sb, key); shown {
		return false
	}
	// A fresh attempt the status does not show yet (statusagg's start write
	// is behind the patch) does not hold it: its stages own the pod, and a
	// pod missing then is one UpgradePod's handler has just deleted, which
	// that handler builds again from spec.template. A pod made here from
	// the copy would be one more pod, replaced at once.
	failed, why, resumes := Resumes(sb, key)
	return resumes && failed == cur && why == agentsv1alpha1.UpgradingReasonPreUpgradeFailed && reason == why
}

// PatchedForFresh reports whether the patcher patched sb for attempt, a
// fresh attempt (one that resumes none): only then does it keep the
// template it replaced for that attempt (AnnotationOriginalTemplateFor).
// A resume's mark is the selector's, moved to the resume at its admission,
// and says nothing of a patch.
func PatchedForFresh(sb *agentsv1alpha1.Sandbox, attempt string) bool {
	if _, _, resumes := Resumes(sb, attempt); resumes {
		return false
	}
	return attempt != "" && sb.Annotations[AnnotationOriginalTemplateFor] == attempt
}

// PatchedFor reports whether the patcher has written sb's spec for attempt,
// fresh or a resume: that write pins the attempt's hooks
// (AnnotationAttemptHooks names it), and for a fresh attempt keeps the
// template it replaced (PatchedForFresh). For a sandbox woken for attempt,
// the patcher writes only once the woken pod is Ready: from then on the
// attempt's stages own the pod.
func PatchedFor(sb *agentsv1alpha1.Sandbox, attempt string) bool {
	return attempt != "" && (HooksFixedFor(sb) == attempt || PatchedForFresh(sb, attempt))
}

// PodTemplate returns the template a pod that sb gets outside UpgradePod is
// built from: OriginalTemplate while it holds, else spec.template. original
// says which.
func PodTemplate(sb *agentsv1alpha1.Sandbox) (tpl *corev1.PodTemplateSpec, original bool) {
	if tpl, ok := OriginalTemplate(sb); ok {
		return tpl, true
	}
	return sb.Spec.Template, false
}

// OriginalTemplateValue encodes AnnotationOriginalTemplate for tpl; ok is
// false when it is larger than MaxOriginalTemplate (or cannot be encoded).
func OriginalTemplateValue(tpl *corev1.PodTemplateSpec) (string, bool) {
	b, err := json.Marshal(tpl)
	if err != nil || len(b) > MaxOriginalTemplate {
		return "", false
	}
	return string(b), true
}
