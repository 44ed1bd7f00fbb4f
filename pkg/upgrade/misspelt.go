package upgrade

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
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

// maxMisspelling is how many single-character edits apart a container name
// of the patch and one of the template count as a misspelling.
const maxMisspelling = 2

// MisspeltContainers describes each container or init container that patch
// adds to tpl (AddedContainers) with nothing but a name and an image, under a
// name at most maxMisspelling edits from a container of the same list in
// tpl: what a misspelt name looks like ("sandbx" for "sandbox"). As written,
// every upgraded pod would get the added container beside the real one,
// which keeps its old image. A real new container almost always says more
// than its image, or has a name of its own.
func MisspeltContainers(tpl *corev1.PodTemplateSpec, patch []byte) []string {
	var doc struct {
		Spec struct {
			Containers     []map[string]json.RawMessage `json:"containers"`
			InitContainers []map[string]json.RawMessage `json:"initContainers"`
		} `json:"spec"`
	}
	if tpl == nil || json.Unmarshal(patch, &doc) != nil {
		return nil
	}
	var out []string
	for _, list := range []struct {
		field   string
		entries []map[string]json.RawMessage
		have    []corev1.Container
	}{{"containers", doc.Spec.Containers, tpl.Spec.Containers}, {"initContainers", doc.Spec.InitContainers, tpl.Spec.InitContainers}} {
		for _, e := range list.entries {
			var name string
			if json.Unmarshal(e["name"], &name) != nil || name == "" || len(e) != 2 || e["image"] == nil {
				continue // a directive, or more than a name and an image
			}
			if slices.ContainsFunc(list.have, func(c corev1.Container) bool { return c.Name == name }) {
				continue
			}
			for _, c := range list.have {
				if d := editDistance(name, c.Name); d <= maxMisspelling {
					out = append(out, fmt.Sprintf("%s/%s (%d %s from %s/%s)", list.field, name, d, plural(d, "edit"), list.field, c.Name))
					break
				}
			}
		}
	}
	return out
}

// editDistance is the Levenshtein distance of a and b (container names are
// short ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// MisspellingNote is what AnnotationMisspeltContainer's value v means to a
// user reading the ops's condition: why molt paused it, and the two ways on.
func MisspellingNote(namespace, name, v string) string {
	return fmt.Sprintf("molt paused this ops before its first sandbox: spec.patch adds %s, with only an image, which looks like a misspelt container name: as written, every upgraded pod would get it beside the real container, which would keep its old image. "+
		"If it is a typo, delete this ops and create one with the right name; if the new container is meant, resume the ops (kubectl patch suo %s -n %s --type merge -p '{\"spec\":{\"paused\":false}}')",
		strings.TrimSpace(v), name, namespace)
}
