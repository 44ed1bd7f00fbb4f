package v1alpha1

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
)

// The CRDs keep no schema for spec.template and spec.volumeClaimTemplates
// (EmbeddedSandboxTemplate), so the API server stores whatever it is given:
// `image: 5` or `cpu: "1 core"` included. Decoded as they are, such a value
// fails the decode of the whole object, and with it every list and watch of
// its kind: one mistyped Sandbox would stop every informer of every molt
// service, in every namespace. So a spec decodes without them when they do
// not decode (UndecodableTemplate), and encodes them back as stored.

// UndecodableTemplate is spec.template and spec.volumeClaimTemplates as
// stored, when they cannot be decoded: Template and VolumeClaimTemplates are
// then nil, and the spec is encoded back with these bytes, so a write of the
// object loses nothing.
type UndecodableTemplate struct {
	Template             json.RawMessage
	VolumeClaimTemplates json.RawMessage
	// Err is the decoder's error.
	Err string
}

// TemplateProblem says why spec.template (or spec.volumeClaimTemplates)
// cannot be used, with what to do; "" when it decoded.
func (t *EmbeddedSandboxTemplate) TemplateProblem() string {
	if t.Undecodable == nil {
		return ""
	}
	return fmt.Sprintf("a field of the wrong type in %s; molt builds, patches and upgrades nothing from this template until it is fixed (kubectl edit)", t.Undecodable.Err)
}

// NoTemplateProblem says why a sandbox without spec.template gets no pod, and no
// upgrade, and what to do.
const NoTemplateProblem = "the sandbox has no spec.template; molt builds a sandbox's pod only from its inline spec.template (spec.templateRef is not supported): set spec.template (kubectl edit)"

// NoSetTemplateProblem says why a SandboxSet without spec.template keeps no
// pool (its members are neither created, replaced nor deleted), and what to
// do: the set's TemplateRefused condition (statusagg) says it, with the
// patch command for the set.
const NoSetTemplateProblem = "the SandboxSet has no spec.template; molt builds a pool's members only from its inline spec.template (spec.templateRef is not supported): set spec.template"

const (
	fieldTemplate             = "template"
	fieldVolumeClaimTemplates = "volumeClaimTemplates"
)

// decodeSpec decodes data into spec (a pointer to a spec type without this
// file's methods) as the API machinery does (case-sensitive, integers kept).
// When that fails and decoding without template and volumeClaimTemplates
// succeeds, those two are kept as stored in embedded.Undecodable instead.
func decodeSpec(data []byte, spec any, embedded *EmbeddedSandboxTemplate) error {
	err := kjson.UnmarshalCaseSensitivePreserveInts(data, spec)
	if err == nil {
		return nil
	}
	var fields map[string]json.RawMessage
	if kjson.UnmarshalCaseSensitivePreserveInts(data, &fields) != nil {
		return err
	}
	tmpl, hasTmpl := fields[fieldTemplate]
	claims, hasClaims := fields[fieldVolumeClaimTemplates]
	if !hasTmpl && !hasClaims {
		return err
	}
	delete(fields, fieldTemplate)
	delete(fields, fieldVolumeClaimTemplates)
	rest, merr := json.Marshal(fields)
	if merr != nil {
		return err
	}
	if kjson.UnmarshalCaseSensitivePreserveInts(rest, spec) != nil {
		return err // something else is wrong too: the decoder's error stands
	}
	embedded.Template, embedded.VolumeClaimTemplates = nil, nil
	embedded.Undecodable = &UndecodableTemplate{Template: tmpl, VolumeClaimTemplates: claims, Err: whichField(tmpl, claims, err)}
	return nil
}

// whichField names the field that did not decode in err's message.
func whichField(tmpl, claims json.RawMessage, err error) string {
	if tmpl != nil {
		if terr := kjson.UnmarshalCaseSensitivePreserveInts(tmpl, &corev1.PodTemplateSpec{}); terr != nil {
			return "spec.template: " + terr.Error()
		}
	}
	if claims != nil {
		if cerr := kjson.UnmarshalCaseSensitivePreserveInts(claims, &[]corev1.PersistentVolumeClaim{}); cerr != nil {
			return "spec.volumeClaimTemplates: " + cerr.Error()
		}
	}
	return err.Error()
}

// encodeSpec is the JSON of a spec whose encoding without this file's
// methods is data: with an Undecodable template, the stored bytes are put
// back.
func encodeSpec(data []byte, embedded *EmbeddedSandboxTemplate) ([]byte, error) {
	u := embedded.Undecodable
	if u == nil {
		return data, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	// Put back only what no code has set since it was decoded.
	if _, set := fields[fieldTemplate]; u.Template != nil && !set {
		fields[fieldTemplate] = u.Template
	}
	if _, set := fields[fieldVolumeClaimTemplates]; u.VolumeClaimTemplates != nil && !set {
		fields[fieldVolumeClaimTemplates] = u.VolumeClaimTemplates
	}
	return json.Marshal(fields)
}

// UnmarshalJSON decodes a SandboxSpec; an undecodable template is kept
// aside (UndecodableTemplate) instead of failing the Sandbox's decode.
func (s *SandboxSpec) UnmarshalJSON(data []byte) error {
	type plain SandboxSpec
	*s = SandboxSpec{}
	return decodeSpec(data, (*plain)(s), &s.EmbeddedSandboxTemplate)
}

// MarshalJSON encodes a SandboxSpec, with an undecodable template as stored.
func (s SandboxSpec) MarshalJSON() ([]byte, error) {
	type plain SandboxSpec
	data, err := json.Marshal(plain(s))
	if err != nil {
		return nil, err
	}
	return encodeSpec(data, &s.EmbeddedSandboxTemplate)
}

// UnmarshalJSON decodes a SandboxSetSpec; an undecodable template is kept
// aside (UndecodableTemplate) instead of failing the SandboxSet's decode.
func (s *SandboxSetSpec) UnmarshalJSON(data []byte) error {
	type plain SandboxSetSpec
	*s = SandboxSetSpec{}
	return decodeSpec(data, (*plain)(s), &s.EmbeddedSandboxTemplate)
}

// MarshalJSON encodes a SandboxSetSpec, with an undecodable template as
// stored.
func (s SandboxSetSpec) MarshalJSON() ([]byte, error) {
	type plain SandboxSetSpec
	data, err := json.Marshal(plain(s))
	if err != nil {
		return nil, err
	}
	return encodeSpec(data, &s.EmbeddedSandboxTemplate)
}
