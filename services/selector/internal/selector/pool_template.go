package selector

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
	"molt.dev/pkg/upgrade"
)

// A pool checks its set's template before it replaces or creates a member
// at that template's revision (rule 8), and records a refusal on the set for
// statusagg to show.

// templateRecheck is how long a refused template's verdict stands before
// the template is checked again: a refusal by quota or admission can clear
// without the template changing.
const templateRecheck = 30 * time.Second

// templateCheck is the verdict on one set's template at one revision.
type templateCheck struct {
	uid      types.UID
	revision string
	refused  string    // why a pod from the template would not run; "" when it would
	at       time.Time // when the template was checked
}

// holds reports whether c is the verdict on revision of the set whose UID
// is uid and still stands at now: an acceptance until the template (or the
// set) changes, a refusal for templateRecheck.
func (c templateCheck) holds(uid types.UID, revision string, now time.Time) bool {
	if c.uid != uid || c.revision != revision {
		return false
	}
	return c.refused == "" || now.Sub(c.at) < templateRecheck
}

// memberRefused starts a verdict that is the API server's refusal of a
// member Sandbox (its words follow), not of the pod.
const memberRefused = "the API server refuses a member Sandbox from it: "

// templateRefused says why a pod from set's template (at revision) would
// not run, "" when it would. The pool asks before it deletes an outdated
// member or creates one on that revision: nothing is destroyed before its
// replacement is known to be acceptable (rule 8). In order:
//
//  1. a verdict that still holds (templateCheck.holds) is reused, so the
//     API server is asked once per set UID and revision;
//  2. an image the kubelet cannot parse (upgrade.ImageProblem): the API
//     server accepts it, and the member would sit in InvalidImageName;
//  3. a server-side dry run of the pod (upgrade.DryRunCreatePod), then of a
//     member Sandbox from it (memberDryRun: a CEL rule, an admission policy
//     or webhook on Sandboxes, which the pod's does not meet; a count quota
//     on Sandboxes does not count, as a delete makes room and a create says
//     MemberCreateRefused): Invalid,
//     or Forbidden by admission, quota or pod security; with the ops'
//     allowance for a full namespace (upgrade.ReplaceRefusal): a
//     ResourceQuota's "exceeded quota" does not count when a pod from
//     baseline (an outdated member's template, nil when there is none) is
//     refused in the same words, the same quotas and the same amounts
//     requested. Then the cause is not the template but a namespace full to
//     the pod (a pool sized to its pod quota refuses every new pod until an
//     outdated member is deleted), and deleting a member makes room for its
//     replacement: the pool goes on as before the check. A template asking
//     for more than the members' (64 cpu where they ask 1, under a 16-cpu
//     quota) is refused in other words and stays refused: deleting a member
//     would not make room for it. Any other refusal stands, even when the
//     baseline is refused too (Pod Security tightened, a webhook refusing
//     both).
//
// The verdict is recorded on the set (recordVerdict), for statusagg to
// show; a refused set is synced again after templateRecheck. An error is
// one a retry may fix (the dry run did not get an answer, or the record
// was not written); no new verdict is kept after a failed dry run.
func (p *pool) templateRefused(ctx context.Context, set *agentsv1alpha1.SandboxSet, revision string, baseline *corev1.PodTemplateSpec, now time.Time) (string, error) {
	key := set.Namespace + "/" + set.Name
	p.mu.Lock()
	last, seen := p.checks[key]
	p.mu.Unlock()
	// record keeps the set's annotation in line with the verdict refused.
	record := func(refused string) error {
		msg := ""
		if refused != "" {
			msg = templateRefusedMessage(set, revision, refused, baseline == nil && upgrade.QuotaExceeded(refused))
		}
		return p.recordVerdict(ctx, set, revision, msg)
	}
	if seen && last.holds(set.UID, revision, now) {
		return last.refused, record(last.refused)
	}
	refused := upgrade.ImageProblem(&set.Spec.Template.Spec)
	if refused == "" {
		var err error
		var before *corev1.Pod
		if baseline != nil {
			before = upgrade.PodFrom(set.Namespace, set.Name, baseline)
		}
		refused, err = upgrade.ReplaceRefusal(ctx, p.dryRun, upgrade.PodFrom(set.Namespace, set.Name, set.Spec.Template), before)
		if err != nil {
			return "", fmt.Errorf("check the template (revision %s) of SandboxSet %s before replacing or creating members: %w", revision, key, err)
		}
	}
	if refused == "" && p.memberDryRun != nil {
		words, err := p.memberDryRun(ctx, newMember(set, revision))
		if err != nil {
			return "", fmt.Errorf("check a member sandbox of SandboxSet %s (revision %s) before replacing or creating members: %w", key, revision, err)
		}
		if words != "" && !upgrade.QuotaExceeded(words) {
			refused = memberRefused + words
		}
	}
	p.mu.Lock()
	p.checks[key] = templateCheck{uid: set.UID, revision: revision, refused: refused, at: now}
	p.mu.Unlock()

	logger := klog.FromContext(ctx)
	wasRefused := seen && last.uid == set.UID && last.revision == revision && last.refused != ""
	switch {
	case refused != "":
		if !wasRefused {
			logger.Info("Refused the template: a pod from it would not run; no idle sandbox was replaced", "revision", revision, "cause", refused)
		}
		p.enqueueAfter(key, templateRecheck)
	case wasRefused:
		logger.Info("The template is accepted now; the pool resumes", "revision", revision)
	}
	return refused, record(refused)
}

// recordVerdict keeps the set's upgrade.AnnotationTemplateCheck in line
// with the verdict: message (templateRefusedMessage) while the template at
// revision is refused, no annotation when message is "". statusagg, which
// owns the set's status and Events, shows it. Written only when it differs
// from what the cache shows.
func (p *pool) recordVerdict(ctx context.Context, set *agentsv1alpha1.SandboxSet, revision, message string) error {
	want := ""
	if message != "" {
		want = upgrade.TemplateCheckValue(revision, message)
	}
	if set.Annotations[upgrade.AnnotationTemplateCheck] == want {
		return nil
	}
	if err := p.record(ctx, set, upgrade.AnnotationTemplateCheck, want); err != nil {
		return fmt.Errorf("record the template check of SandboxSet %s/%s: %w", set.Namespace, set.Name, err)
	}
	return nil
}

// baselineTemplate is the template of a live member on another revision
// than revision (the first found), nil when there is none: what the new
// template's refusal is compared with.
func baselineTemplate(live []*agentsv1alpha1.Sandbox, revision string) *corev1.PodTemplateSpec {
	for _, sb := range live {
		if sb.Labels[agentsv1alpha1.LabelTemplateHash] != revision && sb.Spec.Template != nil {
			return sb.Spec.Template
		}
	}
	return nil
}

// templateRefusedMessage is the TemplateRefused condition's and Event's
// message: what was refused and why (cause, the API server's words), what
// the pool did about it, and what to do. quotaFull says the cause is a
// ResourceQuota's "exceeded quota" with no member on an earlier template
// (a refill after a claim or a scale-up): the namespace is full, and the
// next step is to raise its quota, not to fix the template. The cause is
// cut so that the message, next step included, fits in a condition
// (MaxConditionMessageLength).
func templateRefusedMessage(set *agentsv1alpha1.SandboxSet, revision, cause string, quotaFull bool) string {
	if quotaFull {
		return upgrade.WithNote(
			fmt.Sprintf("SandboxSet %s/%s: the namespace's ResourceQuota is full: it refuses a pod from spec.template (revision %s): %s",
				set.Namespace, set.Name, revision, cause),
			fmt.Sprintf("no sandbox is created until the quota has room (checked again every %s); "+
				"raise the ResourceQuota (`kubectl describe resourcequota -n %s` shows what is used) or free room in the namespace",
				templateRecheck, set.Namespace))
	}
	what := "a pod from spec.template (revision %s) would not run: %s"
	if rest, member := strings.CutPrefix(cause, memberRefused); member {
		what, cause = "a member Sandbox from spec.template (revision %s) would be refused: %s", rest
	}
	return upgrade.WithNote(
		fmt.Sprintf("SandboxSet %s/%s: "+what, set.Namespace, set.Name, revision, cause),
		fmt.Sprintf("no idle sandbox was replaced and none is created from this revision (checked again every %s); "+
			"fix spec.template with `kubectl edit sbs %s -n %s`",
			templateRecheck, set.Name, set.Namespace))
}
