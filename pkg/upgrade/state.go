package upgrade

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

const (
	// ConditionAttempt is the Sandbox condition that says which attempt the
	// Upgrading condition describes: status True, reason the current
	// Upgrading reason, message the attempt id (the ops UID, or for a direct
	// upgrade "direct-<target revision>-<sandbox generation>", see
	// DirectAttemptPrefix). Written by statusagg together with
	// Upgrading; read by selector and statusagg.
	ConditionAttempt = "UpgradeAttempt"

	// AnnotationPodAttempt is set by podcycler on every pod it creates for an
	// upgrade: the attempt that created it. Read by podcycler and statusagg.
	AnnotationPodAttempt = "molt.dev/attempt"

	// AnnotationPodKept is set by podcycler, next to AnnotationPodAttempt, on
	// an original pod that an attempt kept instead of replacing it, as it was
	// Ready on the target revision already: the attempt. That pod was not
	// built by the attempt and holds the workspace (NewPodOf).
	AnnotationPodKept = "molt.dev/kept"

	// AnnotationPodTakenAt is set by podcycler, next to AnnotationPodAttempt,
	// on a pod an attempt did not create but took as its own (kept, or
	// adopted from another writer): when it took it, RFC 3339. The readiness
	// deadline counts from then, not from the pod's creation, so a kept pod
	// that is briefly not Ready is not failed at once. Written and read by
	// podcycler.
	AnnotationPodTakenAt = "molt.dev/taken-at"

	// AnnotationPodOps is set by podcycler, next to AnnotationPodAttempt, on
	// every pod it creates for an upgrade driven by a SandboxUpdateOps: the
	// ops' name. The attempt annotation holds the ops UID; with the name the
	// pod alone says which ops it belongs to, so the readiness wait can check
	// that the sandbox is still labelled by that ops and publish pod-ready
	// with the full ops reference after a restart. Empty for direct
	// upgrades. Written and read by podcycler.
	AnnotationPodOps = "molt.dev/ops"
)

// HookDoneAnnotation is the pod annotation hookrunner sets, to the attempt
// id, once stage's hook (PreUpgrade or PostUpgrade) ran to success on that
// pod: "molt.dev/preupgrade-done", "molt.dev/postupgrade-done". A redelivery
// of the stage's input finds it and does not run the hook again. Written and
// read by hookrunner.
func HookDoneAnnotation(stage string) string {
	return "molt.dev/" + strings.ToLower(stage) + "-done"
}

// HookNoteAnnotation is the pod annotation that keeps, beside the done mark,
// the note on a hook that succeeded but wrote to stderr (agentruntime's
// Result.SuccessNote), for a report sent again from the mark. Written by
// hookrunner.
func HookNoteAnnotation(stage string) string {
	return "molt.dev/" + strings.ToLower(stage) + "-note"
}

// State is where a sandbox stands for one ops.
type State int

const (
	// NotStarted: the ops has not admitted the sandbox.
	NotStarted State = iota
	// Updating: admitted and not yet at a terminal reason for this attempt.
	Updating
	// Updated: this attempt reached Succeeded.
	Updated
	// Failed: this attempt ended in a *Failed reason.
	Failed
)

func (s State) String() string {
	return [...]string{"NotStarted", "Updating", "Updated", "Failed"}[s]
}

// StateFor says where sb stands for the ops named opsName with uid opsUID.
// A sandbox whose label names the ops but whose claim is of another ops of
// that name (ClaimedByOps) has not started for this one.
func StateFor(sb *agentsv1alpha1.Sandbox, opsName string, opsUID types.UID) State {
	reason, ok := UnlabelledClaim(sb, opsName, opsUID)
	switch {
	case ok:
		// Its label removed, the attempt shown: counted by it all the same.
	case !ClaimedByOps(sb, opsName, opsUID):
		return NotStarted
	default:
		if reason, ok = ReasonFor(sb, string(opsUID)); !ok {
			return Updating
		}
	}
	switch {
	case reason == agentsv1alpha1.UpgradingReasonSucceeded:
		return Updated
	case agentsv1alpha1.IsUpgradingFailedReason(reason):
		return Failed
	default:
		return Updating
	}
}

// ReasonFor returns the Upgrading reason of sb if its status describes the
// given attempt.
func ReasonFor(sb *agentsv1alpha1.Sandbox, attempt string) (string, bool) {
	a := meta.FindStatusCondition(sb.Status.Conditions, ConditionAttempt)
	if a == nil || a.Message != attempt {
		return "", false
	}
	up := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading)
	if up == nil {
		return "", false
	}
	return up.Reason, true
}

// CurrentAttempt returns the attempt id the status describes, if any.
func CurrentAttempt(sb *agentsv1alpha1.Sandbox) string {
	if a := meta.FindStatusCondition(sb.Status.Conditions, ConditionAttempt); a != nil {
		return a.Message
	}
	return ""
}

// AnnotationPatchCheck is the SandboxUpdateOps annotation in which selector
// records, before it admits the first sandbox, whether the ops's patch can
// work at all: PatchCheckOK, or the reason it cannot (a strategic merge
// error, an unknown field, a pod the API server refuses). Written once by
// selector (the patch is immutable); read by selector (nothing is admitted
// under an invalid patch) and statusagg (the ops fails with condition
// InvalidPatch carrying the reason).
const AnnotationPatchCheck = "molt.dev/patch-check"

// PatchCheckOK is AnnotationPatchCheck's value for a patch that passed.
const PatchCheckOK = "ok"

// AnnotationPatchDigest is the SandboxUpdateOps annotation the selector writes
// with AnnotationPatchCheck: PatchDigest of the spec.patch it checked. The CRD
// refuses a change to spec.patch, but CEL compares the fields the schema does
// not declare only by key count and shared keys, so swapping one key for
// another (nodeSelector for affinity) gets through. The digest is what tells.
const AnnotationPatchDigest = "molt.dev/patch-digest"

// AnnotationPatchCheckFor is the SandboxUpdateOps annotation the selector
// writes with AnnotationPatchCheck: the UID of the ops the verdict is for.
// An ops saved with `kubectl get -o yaml`, edited and applied again carries
// the first one's annotations; their verdict is not the new ops's.
const AnnotationPatchCheckFor = "molt.dev/patch-check-for"

// PatchVerdict returns the selector's verdict on ops's patch
// (AnnotationPatchCheck); ok is false when the patch was not checked yet,
// or the verdict was recorded for another ops (AnnotationPatchCheckFor). A
// verdict without AnnotationPatchCheckFor (an older molt's) is taken as
// this ops's.
func PatchVerdict(ops *agentsv1alpha1.SandboxUpdateOps) (verdict string, ok bool) {
	verdict, ok = ops.Annotations[AnnotationPatchCheck]
	if uid, recorded := ops.Annotations[AnnotationPatchCheckFor]; ok && recorded && uid != string(ops.UID) {
		return "", false
	}
	return verdict, ok
}

// PatchDigest is the sha256 of a patch's JSON with its keys in order (hex).
func PatchDigest(raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err == nil {
		if canonical, err := json.Marshal(v); err == nil {
			raw = canonical
		}
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// AnnotationTemplateCheck is the SandboxSet annotation the selector writes
// while a pod from the set's template would not run (the image cannot be
// parsed, or the API server refuses the pod): "<revision> <why>". The pool
// then replaces and creates nothing at that revision; the selector removes
// the annotation once the template is accepted. statusagg shows it as the
// set's TemplateRefused condition and Event.
const AnnotationTemplateCheck = "molt.dev/template-check"

// TemplateCheckValue encodes AnnotationTemplateCheck.
func TemplateCheckValue(revision, why string) string { return revision + " " + why }

// TemplateRefusal returns why set's template at revision is refused, as the
// selector recorded it; "" when it is not, or the record is of another
// revision (the template changed since).
func TemplateRefusal(set *agentsv1alpha1.SandboxSet, revision string) string {
	rev, why, ok := strings.Cut(set.Annotations[AnnotationTemplateCheck], " ")
	if !ok || rev != revision {
		return ""
	}
	return why
}

// PatchChanged reports whether ops's spec.patch differs from the one the
// selector checked (AnnotationPatchDigest; false when none was recorded).
func PatchChanged(ops *agentsv1alpha1.SandboxUpdateOps) bool {
	if _, checked := PatchVerdict(ops); !checked {
		return false
	}
	digest, ok := ops.Annotations[AnnotationPatchDigest]
	return ok && digest != PatchDigest(ops.Spec.Patch.Raw)
}

// PatchProblem returns why ops's patch cannot work, "" when it passed or was
// not checked yet: the check's verdict, or, when it passed, a spec.patch
// changed since (AnnotationPatchDigest).
func PatchProblem(ops *agentsv1alpha1.SandboxUpdateOps) string {
	v, ok := PatchVerdict(ops)
	if !ok {
		return ""
	}
	if v != PatchCheckOK {
		return v
	}
	if PatchChanged(ops) {
		return "spec.patch was changed after the selector checked it and began (it is immutable; the API server cannot refuse every change to it); " +
			"no sandbox is started or patched under the changed patch, and those already patched keep the first one: " +
			"delete this SandboxUpdateOps and create a new one with the patch you want"
	}
	return ""
}

// AnnotationClaim is the Sandbox annotation the selector writes in the
// patch that admits the sandbox, "<ops name> <attempt>" (ClaimValue): the
// attempt (the ops's UID) the `update-ops` label is for. The label names the ops only, and an ops
// deleted and applied again under the same name is another attempt: the
// first one's messages still queued (a hookrunner or podcycler that was
// down) must not run its hooks or replace the pod under the second's label.
// Removed with the label on release. Read through ClaimedBy.
const AnnotationClaim = "molt.dev/claim"

// ClaimValue is AnnotationClaim's value for attempt of the ops named opsName.
func ClaimValue(opsName, attempt string) string { return opsName + " " + attempt }

// ClaimOf splits sb's AnnotationClaim into the ops name and the attempt it
// names; both are "" when sb has none or it is not of ClaimValue's shape.
func ClaimOf(sb *agentsv1alpha1.Sandbox) (opsName, attempt string) {
	f := strings.Fields(sb.Annotations[AnnotationClaim])
	if len(f) != 2 {
		return "", ""
	}
	return f[0], f[1]
}

// PointerToken escapes a label or annotation key as one token of a JSON
// pointer (RFC 6901), for the path of a JSON patch operation.
func PointerToken(key string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(key) }

// ClaimedByOps reports whether sb is claimed by the ops named opsName with
// uid opsUID: its label names the ops, and its claim annotation, where it
// names that ops, names this uid. A claim an earlier ops of the same name left
// (deleted without its release: its finalizer removed by hand while no
// selector ran) is not this ops's: counted as this ops's, its sandboxes would
// be requested again at once, past maxUnavailable, and every stage would skip
// them as claimed by another attempt. An ops without a uid (kubectl molt
// plan's object, before it is created) goes by the name alone.
func ClaimedByOps(sb *agentsv1alpha1.Sandbox, opsName string, opsUID types.UID) bool {
	return opsName != "" && ClaimedBy(sb, opsName, string(opsUID))
}

// UnlabelledClaim returns the Upgrading reason of sb's attempt of the ops
// named opsName with uid opsUID when sb lost that ops's `update-ops` label
// (`kubectl label sbx … update-ops-`, or a `kubectl replace` of a manifest
// without it) while its claim annotation still names the ops and its status
// shows the attempt: the ops still counts it (rule 13), by that reason. The
// release of an ops removes the claim annotation with the label, so a
// released sandbox is not one.
//
// A claim annotation wiped with the label (a `kubectl replace`, or a GitOps
// sync, of a manifest from before the claim) counts too while the status shows
// the attempt in a stage: only a writer outside molt removes both then, as a
// release waits for the attempt to end, and the status, which only statusagg
// writes, names the ops by its uid.
func UnlabelledClaim(sb *agentsv1alpha1.Sandbox, opsName string, opsUID types.UID) (string, bool) {
	if opsName == "" || opsUID == "" || sb.DeletionTimestamp != nil || sb.Labels[agentsv1alpha1.LabelUpdateOps] != "" {
		return "", false
	}
	switch sb.Annotations[AnnotationClaim] {
	case ClaimValue(opsName, string(opsUID)):
		return ReasonFor(sb, string(opsUID))
	case "":
		if reason, ok := ReasonFor(sb, string(opsUID)); ok && InProgress(reason) {
			return reason, true
		}
	}
	return "", false
}

// LostLabelMidAttempt reports whether sb lost the label of the ops named
// opsName with uid opsUID while the attempt it claimed sb for is in a stage
// (UnlabelledClaim, in progress; its claim annotation too). It is still
// claimed (ClaimedBy): every stage drives it on, and the selector puts the
// label (and the claim) back.
func LostLabelMidAttempt(sb *agentsv1alpha1.Sandbox, opsName string, opsUID types.UID) bool {
	reason, ok := UnlabelledClaim(sb, opsName, opsUID)
	return ok && InProgress(reason)
}

// ClaimedBy reports whether sb is claimed by the ops named opsName for
// attempt ("" opsName: a direct attempt, which needs no ops label and is
// stale once the status shows a later direct attempt). When
// the claim annotation does not speak of that ops (a sandbox an older molt
// admitted, or relabelled without touching the annotation), the name alone
// decides, as it did.
func ClaimedBy(sb *agentsv1alpha1.Sandbox, opsName, attempt string) bool {
	if sb.Labels[agentsv1alpha1.LabelUpdateOps] != opsName {
		// Its label removed while the attempt is in a stage: still the ops's.
		return opsName != "" && LostLabelMidAttempt(sb, opsName, types.UID(attempt))
	}
	if opsName == "" {
		// A direct attempt has no claim to compare: one its sandbox's
		// status shows superseded by a later direct attempt (a higher
		// generation) is stale, a message that waited in a queue while
		// the user edited the template again; so is one older than the
		// ops attempt the status records (an ops upgraded the sandbox
		// since, at a higher generation: a replayed old message must not
		// recreate its pod). A direct attempt started after that ops's
		// (the user's later edit) has a generation at least the one the
		// ops attempt's last transition saw.
		cur := CurrentAttempt(sb)
		gen, ok := DirectAttemptGeneration(attempt)
		curGen, curOK := DirectAttemptGeneration(cur)
		switch {
		case cur == attempt || !ok || cur == "":
			return true
		case curOK:
			return curGen <= gen
		}
		return meta.FindStatusCondition(sb.Status.Conditions, ConditionAttempt).ObservedGeneration <= gen
	}
	if attempt == "" {
		return true
	}
	claimedBy, claimedFor := ClaimOf(sb)
	return claimedBy != opsName || claimedFor == attempt
}

// AnnotationResumes is the Sandbox annotation selector writes, in the same
// patch that admits the sandbox, when the new attempt continues a failed
// one: "<attempt> <failed attempt> <failed reason> [<earlier failed
// attempt>=<its reason>...]". It is the durable record of what the attempt resumes, so a
// stage re-driven long after `requested` (the watchdog) still knows which
// pod the failed attempt built and never backs that pod up. The earlier
// attempts are the ones the failed attempt itself resumed: after a resume
// fails again, the pod may still be the one an attempt before it built
// (a PostUpgrade resume builds none), and that pod holds no workspace
// either. An earlier attempt whose reason is not known (a record written
// before reasons were kept, or an attempt abandoned before its outcome was
// recorded) is named alone, and counts as one that may have replaced the
// pod. Written by selector; read by patcher, hookrunner and statusagg.
const AnnotationResumes = "molt.dev/resumes"

// maxResumedChain bounds how many failed attempts one record names: a
// longer chain of failures since the last success is not expected, and the
// annotation stays small.
const maxResumedChain = 16

// ResumesValue encodes AnnotationResumes for attempt, which continues
// failedAttempt (that failed with failedReason); earlier are the attempts
// failedAttempt itself continued (its ResumedChain), newest first.
func ResumesValue(attempt, failedAttempt, failedReason string, earlier ...string) string {
	f := append([]string{attempt, failedAttempt, failedReason}, earlier...)
	if keep := 2 + maxResumedChain; len(f) > keep {
		if ChainPastBackup(f[keep:]) {
			// An attempt left out may have replaced the pod: the last one
			// kept loses its reason, so the chain still counts as past
			// its backup.
			f[keep-1], _, _ = strings.Cut(f[keep-1], "=")
		}
		f = f[:keep]
	}
	return strings.Join(f, " ")
}

// Resumes returns the failed attempt and reason that attempt continues, from
// sb's AnnotationResumes (ok false when it continues none).
func Resumes(sb *agentsv1alpha1.Sandbox, attempt string) (failedAttempt, failedReason string, ok bool) {
	f := strings.Fields(sb.Annotations[AnnotationResumes])
	if len(f) < 3 || f[0] != attempt {
		return "", "", false
	}
	return f[1], f[2], true
}

// ResumedChain returns every failed attempt that attempt continues: the
// one it resumes, then those that one continued, newest first (nil when it
// resumes nothing). They are the attempts since the sandbox's last
// success; the pods they built hold no workspace to back up.
func ResumedChain(sb *agentsv1alpha1.Sandbox, attempt string) []string {
	f := strings.Fields(sb.Annotations[AnnotationResumes])
	if len(f) < 3 || f[0] != attempt {
		return nil
	}
	chain := []string{f[1]}
	for _, earlier := range f[3:] {
		a, _, _ := strings.Cut(earlier, "=")
		chain = append(chain, a)
	}
	return chain
}

// pastBackup reports whether an earlier attempt of a record
// (AnnotationResumes: "<attempt>=<reason>", or "<attempt>" when its reason
// is not known) may have got past its backup, and so replaced the pod: its
// reason is not known, or is not a failure before the backup (BeforeBackup).
func pastBackup(earlier string) bool {
	_, reason, known := strings.Cut(earlier, "=")
	return !known || !BeforeBackup(reason)
}

// ChainBehind returns the attempts whose pods a new attempt that continues
// failed must never back up, besides failed itself: the chain failed
// continued (ResumedChain), and also an attempt that continued failed but
// was abandoned before its outcome was recorded (its ops deleted while
// statusagg was behind: the record still names it first, the status still
// shows failed). That attempt may have replaced the pod, with an empty
// workspace, before it was released.
func ChainBehind(sb *agentsv1alpha1.Sandbox, failed string) []string {
	f := strings.Fields(sb.Annotations[AnnotationResumes])
	switch {
	case len(f) < 3:
		return nil
	case f[0] == failed:
		return append([]string{f[1] + "=" + f[2]}, f[3:]...)
	case f[1] == failed:
		return append([]string{f[0]}, f[3:]...) // f[0]'s outcome was never recorded
	}
	return nil
}

// ChainPastBackup reports whether an attempt of chain (ChainBehind's) may
// have got past its backup and replaced the pod (pastBackup).
func ChainPastBackup(chain []string) bool {
	return slices.ContainsFunc(chain, pastBackup)
}

// MayHaveReplacedPod reports whether attempt, whose status shows the failed
// reason, or an attempt of its chain may have replaced sb's pod (deleted
// the pod with the workspace, after a backup or checkpoint): a pod built
// for sb now is then a new pod of the attempt, which a resume must never
// back up over that backup. It holds when
//   - reason is UpgradePod's failure or later;
//   - attempt continued a failed attempt that failed at UpgradePod or later,
//     or one that continued others of which one failed past its backup, or
//     whose reason the record does not keep (ChainPastBackup);
//   - a later attempt continued attempt and was abandoned before its
//     outcome was recorded (ChainBehind): it may have got that far. One the
//     sandbox is claimed for now (admitted, not recorded yet, as a paused
//     sandbox is woken for it first) or a direct one is not abandoned: its
//     own stages own the pod.
//
// An attempt that failed before UpgradePod with no such chain (waking,
// PreUpgrade, Checkpointing) never deleted its pod: a pod built now
// replaces one lost otherwise, holds the workspace from then on, and is a
// plain pod that a resume backs up first (except after an ops's
// CheckpointFailed past its backup: CheckpointFailedAfterBackup).
func MayHaveReplacedPod(sb *agentsv1alpha1.Sandbox, attempt, reason string) bool {
	upgradePod := Rank(agentsv1alpha1.UpgradingReasonUpgradePod)
	if Rank(reason) >= upgradePod {
		return true
	}
	f := strings.Fields(sb.Annotations[AnnotationResumes])
	switch {
	case len(f) < 3:
		return false
	case f[0] == attempt:
		return Rank(f[2]) >= upgradePod || ChainPastBackup(f[3:])
	case f[1] == attempt:
		if strings.HasPrefix(f[0], DirectAttemptPrefix) {
			return false
		}
		opsName, claimed := ClaimOf(sb)
		return !(claimed == f[0] && opsName != "" && sb.Labels[agentsv1alpha1.LabelUpdateOps] == opsName)
	}
	return false
}

// BuiltByResumed reports whether pod is a new pod (NewPodOf) built by a
// failed attempt that attempt continues (ResumedChain), or by resumed, the
// failed attempt an event names (for a record written before the chain was
// kept). An original pod such an attempt kept is not one: it holds the
// workspace, and a resume backs it up again.
func BuiltByResumed(pod *corev1.Pod, sb *agentsv1alpha1.Sandbox, attempt, resumed string) bool {
	return NewPodOf(pod, resumed) || slices.ContainsFunc(ResumedChain(sb, attempt), func(a string) bool { return NewPodOf(pod, a) })
}

// NewPodOf reports whether pod is a new pod that attempt built: it carries
// the attempt (BuiltBy) and is not an original pod the attempt kept
// (AnnotationPodKept). A new pod holds no workspace of its own.
func NewPodOf(pod *corev1.Pod, attempt string) bool {
	return BuiltBy(pod, attempt) && pod.Annotations[AnnotationPodKept] != attempt
}

// DirectAttemptPrefix starts the attempt id of an upgrade without an ops:
// "direct-<target revision>-<sandbox generation>". Written by selector; read
// by selector and statusagg (a direct attempt has no ops to drive it).
const DirectAttemptPrefix = "direct-"

// DirectAttempt is the attempt id of a direct upgrade to revision, started at the
// sandbox's generation.
func DirectAttempt(revision string, generation int64) string {
	return DirectAttemptPrefix + revision + "-" + strconv.FormatInt(generation, 10)
}

// DirectAttemptGeneration returns the sandbox generation a direct attempt id was
// started at (ok false for any other attempt id).
func DirectAttemptGeneration(attempt string) (int64, bool) {
	if !strings.HasPrefix(attempt, DirectAttemptPrefix) {
		return 0, false
	}
	gen, err := strconv.ParseInt(attempt[strings.LastIndex(attempt, "-")+1:], 10, 64)
	return gen, err == nil
}

// CountsMayChange says whether a sandbox's change may change how an ops
// counts it, and so what the ops may admit next: its labels (the claim,
// upgrade-failed), its deletion, its phase, or its attempt's start or end. A
// stage moving on within an attempt, a pod change or a spec change does not
// (a user's template edit that makes a not-started sandbox need no update is
// seen by the next recount). Selector and statusagg recount an ops at once
// on such a change, and the rest with the next of a slower, regular pace,
// since each recount reads every sandbox of the namespace.
func CountsMayChange(old, cur *agentsv1alpha1.Sandbox) bool {
	if !maps.Equal(old.Labels, cur.Labels) || (old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) || old.Status.Phase != cur.Status.Phase {
		return true
	}
	oldAttempt, curAttempt := CurrentAttempt(old), CurrentAttempt(cur)
	oldReason, _ := ReasonFor(old, oldAttempt)
	curReason, _ := ReasonFor(cur, curAttempt)
	return oldAttempt != curAttempt || Terminal(oldReason) != Terminal(curReason)
}

// TakesBudgetOnly says whether a change can only use an ops's budget, never
// free it or add a candidate: nothing ended (no terminal reason, no
// deletion), the phase stayed or became Upgrading, and the labels stayed but
// for the ops label being set where there was none (the claim). Selector
// recounts such a change at its slower pace even while sandboxes wait for
// budget: it cannot let one start.
func TakesBudgetOnly(old, cur *agentsv1alpha1.Sandbox) bool {
	if !sameDeletion(old, cur) {
		return false
	}
	if old.Status.Phase != cur.Status.Phase && cur.Status.Phase != agentsv1alpha1.SandboxUpgrading {
		return false
	}
	if oldClaim := old.Labels[agentsv1alpha1.LabelUpdateOps]; oldClaim != cur.Labels[agentsv1alpha1.LabelUpdateOps] && oldClaim != "" {
		return false
	}
	return equalButClaim(old.Labels, cur.Labels) && !Terminal(currentReason(cur))
}

// SucceededOnly says whether a change is its attempt's success and nothing
// else that counts: the same labels, the same deletion state, and the
// current attempt's reason Succeeded. It frees budget, but cannot add a
// candidate or fail an ops.
func SucceededOnly(old, cur *agentsv1alpha1.Sandbox) bool {
	return sameDeletion(old, cur) && maps.Equal(old.Labels, cur.Labels) &&
		currentReason(cur) == agentsv1alpha1.UpgradingReasonSucceeded
}

// sameDeletion says whether old and cur are both deleted or both not.
func sameDeletion(old, cur *agentsv1alpha1.Sandbox) bool {
	return (old.DeletionTimestamp == nil) == (cur.DeletionTimestamp == nil)
}

// currentReason is the reason of sb's current attempt ("" when none).
func currentReason(sb *agentsv1alpha1.Sandbox) string {
	reason, _ := ReasonFor(sb, CurrentAttempt(sb))
	return reason
}

// equalButClaim says whether a and b hold the same labels, the ops label
// aside. It allocates nothing: informers call it on every sandbox update.
func equalButClaim(a, b map[string]string) bool {
	n := 0
	for k, v := range a {
		if k == agentsv1alpha1.LabelUpdateOps {
			continue
		}
		if w, ok := b[k]; !ok || w != v {
			return false
		}
		n++
	}
	m := len(b)
	if _, ok := b[agentsv1alpha1.LabelUpdateOps]; ok {
		m--
	}
	return n == m
}
