package upgrade

import "encoding/json"

// AnnotationPatch is a JSON merge patch that sets one annotation to value,
// or removes it when value is "": the one-key writes of molt's marks (the
// strategy mark, the pod-create refusal).
func AnnotationPatch(key, value string) []byte {
	var v any
	if value != "" {
		v = value
	}
	// A map of strings to a string or null always encodes.
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	return b
}
