package main

import (
	"maps"
	"strings"
	"testing"
)

func TestParseSeries(t *testing.T) {
	for _, tc := range []struct {
		name   string
		line   string
		labels map[string]string
		value  float64
		ok     bool
	}{
		{"sandbox status patch",
			`apiserver_request_total{code="200",component="apiserver",dry_run="",group="agents.kruise.io",resource="sandboxes",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 1234`,
			map[string]string{"code": "200", "component": "apiserver", "dry_run": "", "group": "agents.kruise.io", "resource": "sandboxes", "scope": "resource", "subresource": "status", "verb": "PATCH", "version": "v1alpha1"},
			1234, true},
		{"escaped quote and timestamp", `apiserver_request_total{a="x\"y,z}",b="2"} 5e+02 1700000000`, map[string]string{"a": `x"y,z}`, "b": "2"}, 500, true},
		{"other metric", `apiserver_request_total_other{a="1"} 2`, nil, 0, false},
		{"comment", `# TYPE apiserver_request_total counter`, nil, 0, false},
		{"unterminated value", `apiserver_request_total{a="1} 2`, nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labels, v, ok := parseSeries(tc.line, "apiserver_request_total")
			if ok != tc.ok || v != tc.value || !maps.Equal(labels, tc.labels) {
				t.Errorf("parseSeries = %v, %v, %v; want %v, %v, %v", labels, v, ok, tc.labels, tc.value, tc.ok)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  requestKey
		want string
	}{
		{"sandbox patch", requestKey{verb: "PATCH", group: agentsGroup, resource: "sandboxes"}, classMolt},
		{"sandbox status", requestKey{verb: "PUT", group: agentsGroup, resource: "sandboxes", subresource: "status"}, classMolt},
		{"ops status", requestKey{verb: "PATCH", group: agentsGroup, resource: "sandboxupdateops", subresource: "status"}, classMolt},
		{"checkpoint create", requestKey{verb: "POST", group: agentsGroup, resource: "checkpoints"}, classMolt},
		{"pod create", requestKey{verb: "POST", resource: "pods"}, classMolt},
		{"pod delete", requestKey{verb: "DELETE", resource: "pods"}, classMolt},
		{"hook's done mark", requestKey{verb: "PATCH", resource: "pods"}, classMolt},
		{"kwok pod status", requestKey{verb: "PATCH", resource: "pods", subresource: "status"}, classRest},
		{"scheduler binding", requestKey{verb: "POST", resource: "pods", subresource: "binding"}, classRest},
		{"core event", requestKey{verb: "POST", resource: "events"}, classAside},
		{"events.k8s.io event", requestKey{verb: "PATCH", group: "events.k8s.io", resource: "events"}, classAside},
		{"lease", requestKey{verb: "PUT", group: "coordination.k8s.io", resource: "leases"}, classAside},
		{"node status", requestKey{verb: "PATCH", resource: "nodes", subresource: "status"}, classRest},
		{"dry-run pod create", requestKey{verb: "POST", resource: "pods", code: "201", dryRun: "All"}, classDryRun},
		{"kubelet's final delete", requestKey{verb: "DELETE", resource: "pods", code: "200", kubelet: true}, classRest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.key); got != tc.want {
				t.Errorf("classify(%v) = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}

func TestAttributeKubeletDeletes(t *testing.T) {
	kubelet := requestKey{verb: "DELETE", resource: "pods", code: "200", kubelet: true}
	for _, tc := range []struct {
		name               string
		total, byMolt      float64
		wantMolt, wantRest float64
	}{
		{"graceful delete then the kubelet's", 2000, 1000, 1000, 1000},
		{"no kubelet deletes", 1000, 1000, 1000, 0},
		{"podcycler count above the server's (a reset replica)", 500, 800, 500, 0},
		{"nothing by molt", 300, 0, 0, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := map[requestKey]float64{podDelete: tc.total}
			attributeKubeletDeletes(w, tc.byMolt)
			if w[podDelete] != tc.wantMolt || w[kubelet] != tc.wantRest {
				t.Errorf("molt %v, kubelet %v; want %v, %v", w[podDelete], w[kubelet], tc.wantMolt, tc.wantRest)
			}
			if ok, _ := writeTotals(w, classMolt); ok != tc.wantMolt {
				t.Errorf("molt's writes %v, want %v", ok, tc.wantMolt)
			}
		})
	}
}

// TestWriteKindsTableKeepsOnlyTheClassesAsked: the creation table lists molt's
// writes per sandbox, refused ones included, and leaves out the rest of the stack.
func TestWriteKindsTableKeepsOnlyTheClassesAsked(t *testing.T) {
	refused := requestKey{verb: "POST", resource: "pods", code: "409"}
	created := requestKey{verb: "POST", resource: "pods", code: "201"}
	binding := requestKey{verb: "POST", resource: "pods", subresource: "binding", code: "201"}
	runs := []runResult{{shape: shape{key: "a"}, n: 200, setupWrites: map[requestKey]float64{refused: 1, created: 200, binding: 200}}}
	var b strings.Builder
	writeKindsTable(&b, runs, func(r runResult) map[requestKey]float64 { return r.setupWrites }, []string{classMolt})
	want := "| whose | write | a |\n| --- | --- | --- |\n| molt | POST pods 201 | 1.000 |\n| molt | POST pods 409 | 0.005 |\n"
	if got := b.String(); got != want {
		t.Errorf("table =\n%s\nwant\n%s", got, want)
	}
}
