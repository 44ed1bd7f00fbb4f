package selector

import (
	"encoding/json"
)

// metaPatch is a JSON merge patch on an object's metadata. A nil map value
// (null) removes that label or annotation. A non-empty ResourceVersion makes
// the API server refuse the patch with a Conflict if the object changed
// since it was read: admission decisions are made on that version.
type metaPatch struct {
	Metadata metaFields `json:"metadata"`
}

type metaFields struct {
	ResourceVersion string             `json:"resourceVersion,omitempty"`
	Labels          map[string]*string `json:"labels,omitempty"`
	Annotations     map[string]*string `json:"annotations,omitempty"`
	// Finalizers replaces the whole list when set.
	Finalizers *[]string `json:"finalizers,omitempty"`
}

func (p metaPatch) encode() []byte {
	// Marshalling strings, maps of *string and a []string cannot fail.
	b, _ := json.Marshal(p)
	return b
}

// ptr returns a pointer to a label or annotation value.
func ptr(s string) *string { return &s }
