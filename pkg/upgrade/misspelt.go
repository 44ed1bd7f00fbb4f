package upgrade

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// AnnotationMisspeltContainer is the SandboxUpdateOps annotation the selector
// writes, in the same write as spec.paused: true, when it pauses an ops
// before its first sandbox because the patch adds a container whose name
// looks like a misspelling of one the template has (MisspeltContainers): its
// value says which. Written once; once there, the selector never pauses the
// ops for it again, so resuming the ops is how a user says the new container
// is meant. Read by statusagg (the Progressing condition says why the ops is
// paused, and what to do).
const AnnotationMisspeltContainer = "molt.dev/misspelt-container"

// AnnotationMisspeltPausedAt is the SandboxUpdateOps annotation written
// with AnnotationMisspeltContainer: the ops's metadata.generation once
// paused by that write, and its UID (PausedAtValue). While the ops is still at it, the pause is molt's;
// a later pause (after the user resumed) is the user's own.
const AnnotationMisspeltPausedAt = "molt.dev/misspelt-container-paused-at"

// PausedForMisspelling returns AnnotationMisspeltContainer's value when ops
// is paused by the selector's write of it and not resumed since.
func PausedForMisspelling(ops *agentsv1alpha1.SandboxUpdateOps) (string, bool) {
	return pausedBy(ops, AnnotationMisspeltContainer, AnnotationMisspeltPausedAt)
}

// pausedBy returns the value of the annotation the selector wrote with
// spec.paused: true and pausedAt (PausedAtValue), while ops is still paused
// at the generation that write made: a later pause is the user's own.
func pausedBy(ops *agentsv1alpha1.SandboxUpdateOps, annotation, pausedAt string) (string, bool) {
	v, ok := ops.Annotations[annotation]
	gen, uid, _ := strings.Cut(ops.Annotations[pausedAt], " ")
	if !ok || !ops.Spec.Paused || gen != strconv.FormatInt(ops.Generation, 10) || (uid != "" && uid != string(ops.UID)) {
		return "", false
	}
	return v, true
}

// PausedAtValue is what the selector writes in a paused-at annotation
// (AnnotationMisspeltPausedAt, AnnotationNoBackupPausedAt,
// AnnotationCheckpointKeptPausedAt) with its pause of ops: the generation
// that write makes (it changes spec) and the ops's UID.
func PausedAtValue(ops *agentsv1alpha1.SandboxUpdateOps) string {
	return strconv.FormatInt(ops.Generation+1, 10) + " " + string(ops.UID)
}

// PausedOnce reports whether the selector paused ops for annotation already
// (its pauses come once per ops: resuming is the user's answer). An ops
// created from a copy of another one (`kubectl get -o yaml`, edited, applied
// again) carries that one's annotations, and its UID in pausedAt: that is
// not this ops's pause, and it is paused again. A paused-at value with no
// UID (an older molt's; an annotation copied on purpose, as `kubectl molt
// retry` does for a meant container) is taken as this ops's.
func PausedOnce(ops *agentsv1alpha1.SandboxUpdateOps, annotation, pausedAt string) bool {
	if _, ok := ops.Annotations[annotation]; !ok {
		return false
	}
	_, uid, _ := strings.Cut(ops.Annotations[pausedAt], " ")
	return uid == "" || uid == string(ops.UID)
}

// maxMisspelling is how many single-character edits apart a container name
// of the patch and one of the template count as a misspelling.
const maxMisspelling = 2

// MisspeltContainers describes each container or init container that patch
// adds to tpl (AddedContainers) the way a misspelt name of one of tpl's
// containers does ("sandbx" for "sandbox"): the entry has a name and an
// image (and may carry more: a typo brings the fields meant for the real
// container along, an env or resources); the name is at most maxMisspelling edits (one for names of
// four characters or fewer) from a container of the same list that the patch
// does not name itself; the two images are of the same repository (a new tag
// of the real container's image); and the names do not differ only in a
// trailing number (worker-1, worker-2). As written, every upgraded pod would
// get the added container beside the real one, which keeps its old image.
func MisspeltContainers(tpl *corev1.PodTemplateSpec, patch []byte) []string {
	var out []string
	for _, list := range containerLists(tpl, patch) {
		named := map[string]bool{}
		for _, e := range list.entries {
			var name string
			if json.Unmarshal(e["name"], &name) == nil {
				named[name] = true
			}
		}
		for _, e := range list.entries {
			var name, image string
			if json.Unmarshal(e["name"], &name) != nil || name == "" || json.Unmarshal(e["image"], &image) != nil || image == "" {
				continue // a directive, or an entry with no image
			}
			if slices.ContainsFunc(list.have, func(c corev1.Container) bool { return c.Name == name }) {
				continue
			}
			limit := maxMisspelling
			if len(name) <= 4 {
				limit = 1
			}
			for _, c := range list.have {
				if named[c.Name] || imageRepository(c.Image) != imageRepository(image) || strings.TrimRight(c.Name, "-0123456789") == strings.TrimRight(name, "-0123456789") {
					continue
				}
				if d := editDistance(name, c.Name); d <= limit {
					out = append(out, fmt.Sprintf("%s/%s (%d %s from %s/%s)", list.field, name, d, plural(d, "edit"), list.field, c.Name))
					break
				}
			}
		}
	}
	return out
}

// imageRepository is image without its tag and digest
// ("registry:5000/team/app:v2@sha256:..." → "registry:5000/team/app").
func imageRepository(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// editDistance is the number of single-character insertions, deletions,
// substitutions and swaps of neighbours that turn a into b (the optimal
// string alignment distance; container names are short ASCII).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

func plural(n int, word string) string {
	return Agree(n, word, word+"s")
}

// Sandboxes is "1 sandbox" or "N sandboxes", for a message that counts them.
func Sandboxes(n int) string {
	return fmt.Sprintf("%d %s", n, Agree(n, "sandbox", "sandboxes"))
}

// Agree is one when n is 1, else many: the verb or pronoun that agrees with
// a count of n.
func Agree(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// MisspellingNote is what AnnotationMisspeltContainer's value v means to a
// user reading the ops's condition: why molt paused it, and the two ways on.
func MisspellingNote(namespace, name, v string) string {
	return fmt.Sprintf("molt paused this ops before its first sandbox: spec.patch adds %s, with a new tag of that container's image, which looks like a misspelt container name: as written, every upgraded pod would get it beside the real container, which would keep its old image. "+
		"If it is a typo, delete this ops and create one with the right name; if the new container is meant, resume the ops (kubectl patch suo %s -n %s --type merge -p '{\"spec\":{\"paused\":false}}')",
		strings.TrimSpace(v), name, namespace)
}
