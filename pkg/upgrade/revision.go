package upgrade

import (
	"encoding/json"
	"fmt"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// Revision is the hash of a pod template, used as the pod's
// pod-template-hash label and as Sandbox status.updateRevision. Equal
// templates give equal revisions; the encoding is Go's JSON of the typed
// template, which is deterministic.
func Revision(tpl *corev1.PodTemplateSpec) (string, error) {
	if tpl == nil {
		return "", fmt.Errorf("revision of an empty template")
	}
	data, err := json.Marshal(tpl)
	if err != nil {
		return "", fmt.Errorf("encode template: %w", err)
	}
	h := fnv.New32a()
	_, _ = h.Write(data)
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32())), nil
}
