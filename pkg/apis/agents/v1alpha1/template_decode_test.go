package v1alpha1_test

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"molt.dev/pkg/apis/agents/v1alpha1"
)

// A list with one sandbox whose template has a field of the wrong type
// decodes, as the API machinery decodes it for an informer: the good item
// whole, the bad one without its template (TemplateProblem says why), and
// the bad one encodes back with its template as stored.
func TestUndecodableTemplateDoesNotFailTheList(t *testing.T) {
	const list = `{"apiVersion":"agents.kruise.io/v1alpha1","kind":"SandboxList","metadata":{},"items":[
	 {"metadata":{"name":"good"},"spec":{"upgradePolicy":{"type":"Recreate"},"template":{"spec":{"containers":[{"name":"sandbox","image":"agent:v1"}]}}}},
	 {"metadata":{"name":"bad"},"spec":{"paused":true,"upgradePolicy":{"type":"Recreate"},
	   "template":{"spec":{"containers":[{"name":"sandbox","image":5,"resources":{"limits":{"cpu":"1 core"}}}]}},
	   "volumeClaimTemplates":[{"metadata":{"name":"ws"}}]}}]}`
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme)
	obj, _, err := codecs.UniversalDeserializer().Decode([]byte(list), nil, nil)
	if err != nil {
		t.Fatalf("decode the list: %v", err)
	}
	items := obj.(*v1alpha1.SandboxList).Items
	if len(items) != 2 {
		t.Fatalf("decoded %d items, want 2", len(items))
	}
	good, bad := items[0], items[1]
	if good.Spec.Template == nil || good.Spec.Template.Spec.Containers[0].Image != "agent:v1" || good.Spec.TemplateProblem() != "" {
		t.Errorf("good item decoded as %+v, problem %q", good.Spec, good.Spec.TemplateProblem())
	}
	if bad.Spec.Template != nil || bad.Spec.VolumeClaimTemplates != nil {
		t.Errorf("bad item kept a partly decoded template: %+v", bad.Spec.EmbeddedSandboxTemplate)
	}
	if !bad.Spec.Paused || bad.Spec.UpgradePolicy == nil || bad.Spec.UpgradePolicy.Type != v1alpha1.UpgradeTypeRecreate {
		t.Errorf("bad item lost its other fields: %+v", bad.Spec)
	}
	if p := bad.Spec.TemplateProblem(); !strings.Contains(p, "spec.template") || !strings.Contains(p, "fix") {
		t.Errorf("TemplateProblem %q, want the field, the cause and what to do", p)
	}

	// A copy written back (an Update of the object) keeps the stored template.
	out, err := json.Marshal(bad.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Spec map[string]json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if got := string(back.Spec["template"]); !strings.Contains(got, `"image":5`) || !strings.Contains(got, `"1 core"`) {
		t.Errorf("encoded template %s, want it as stored", got)
	}
	if got := string(back.Spec["volumeClaimTemplates"]); !strings.Contains(got, `"ws"`) {
		t.Errorf("encoded volumeClaimTemplates %s, want them as stored", got)
	}
	if string(back.Spec["paused"]) != "true" {
		t.Errorf("encoded spec %s lost paused", out)
	}

	// A SandboxSet the same way.
	var set v1alpha1.SandboxSet
	if err := json.Unmarshal([]byte(`{"spec":{"replicas":2,"template":{"spec":{"containers":"oops"}}}}`), &set); err != nil {
		t.Fatalf("decode a SandboxSet with a bad template: %v", err)
	}
	if set.Spec.Replicas != 2 || set.Spec.Template != nil || set.Spec.TemplateProblem() == "" {
		t.Errorf("SandboxSet decoded as %+v", set.Spec)
	}
	if out, err := json.Marshal(set); err != nil || !strings.Contains(string(out), `"containers":"oops"`) {
		t.Errorf("SandboxSet encoded as %s (%v), want its template as stored", out, err)
	}

	// Anything else of the wrong type still fails, as before.
	if err := json.Unmarshal([]byte(`{"spec":{"paused":"yes","template":{}}}`), &v1alpha1.Sandbox{}); err == nil {
		t.Error("a spec whose other fields are wrong decoded")
	}
}
