package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// agentsGroup is the API group of Sandbox, SandboxUpdateOps, SandboxSet and
// Checkpoint.
const agentsGroup = "agents.kruise.io"

// requestKey is one kind of write kube-apiserver counts in
// apiserver_request_total; series that differ only in other labels
// (version, scope, component) are summed. dryRun is the dry_run label (a
// server-side dry run stores nothing); kubelet marks the pod deletes that
// finish a graceful delete, the kubelet's part (attributeKubeletDeletes).
type requestKey struct {
	verb, group, resource, subresource, code string
	dryRun                                   string
	kubelet                                  bool
}

func (k requestKey) success() bool { return strings.HasPrefix(k.code, "2") }

func (k requestKey) String() string {
	r := k.resource
	if k.group != "" {
		r = k.group + "/" + r
	}
	if k.subresource != "" {
		r += "/" + k.subresource
	}
	s := fmt.Sprintf("%s %s %s", k.verb, r, k.code)
	switch {
	case k.dryRun != "":
		s += " (dry run)"
	case k.kubelet:
		s += " (the local kubelet's final delete)"
	}
	return s
}

// writeVerbs are the verbs of apiserver_request_total that change state.
var writeVerbs = []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}

// Classes of writes, as issue 12 counts them.
const (
	classMolt  = "molt"
	classAside = "events and leases"
	classRest  = "rest of stack"
	// classDryRun: server-side dry runs (the podcycler's check of each new
	// pod before it deletes the old one, DESIGN.md rule 8) store nothing and
	// reach no watcher; they are counted apart from writes.
	classDryRun = "dry runs"
)

// classify says whose write k is: molt's services write sandboxes (any
// subresource), sandboxupdateops, sandboxsets and checkpoints, and create,
// delete and patch pods (hookrunner's and podcycler's marks; kwok writes
// only pods/status); Events and leases are counted aside; everything else
// (kwok's pods/status, the scheduler's bindings, …) is the rest of the stack.
func classify(k requestKey) string {
	switch {
	case k.dryRun != "":
		return classDryRun
	case k.kubelet:
		return classRest
	case k.resource == "events" || k.resource == "leases":
		return classAside
	case k.group == agentsGroup && slices.Contains([]string{"sandboxes", "sandboxupdateops", "sandboxsets", "checkpoints"}, k.resource):
		return classMolt
	case k.group == "" && k.resource == "pods" && k.subresource == "" && (k.verb == "POST" || k.verb == "DELETE" || k.verb == "PATCH"):
		return classMolt
	default:
		return classRest
	}
}

// apiserverWrites scrapes kube-apiserver's apiserver_request_total, write
// verbs only.
func apiserverWrites(ctx context.Context, kube kubernetes.Interface) (map[requestKey]float64, error) {
	body, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape kube-apiserver /metrics: %w", err)
	}
	out := map[requestKey]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		labels, v, ok := parseSeries(sc.Text(), "apiserver_request_total")
		if !ok || !slices.Contains(writeVerbs, labels["verb"]) {
			continue
		}
		out[requestKey{verb: labels["verb"], group: labels["group"], resource: labels["resource"], subresource: labels["subresource"], code: labels["code"], dryRun: labels["dry_run"]}] += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read kube-apiserver /metrics: %w", err)
	}
	return out, nil
}

// parseSeries parses one line of the Prometheus text format if it is a
// sample of metric: `name{a="x",b="y\"z"} value [timestamp]`.
func parseSeries(line, metric string) (map[string]string, float64, bool) {
	rest, ok := strings.CutPrefix(line, metric+"{")
	if !ok {
		return nil, 0, false
	}
	labels := map[string]string{}
	for !strings.HasPrefix(rest, "}") {
		name, after, ok := strings.Cut(rest, `="`)
		if !ok {
			return nil, 0, false
		}
		var val strings.Builder
		i := 0
		for ; i < len(after) && after[i] != '"'; i++ {
			if after[i] == '\\' && i+1 < len(after) {
				i++
				if after[i] == 'n' {
					val.WriteByte('\n')
					continue
				}
			}
			val.WriteByte(after[i])
		}
		if i == len(after) {
			return nil, 0, false
		}
		labels[strings.TrimSpace(name)] = val.String()
		rest = strings.TrimPrefix(after[i+1:], ",")
	}
	fields := strings.Fields(rest[1:])
	if len(fields) == 0 {
		return nil, 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return labels, v, err == nil
}

// deltaWrites is after − before, without the kinds that did not change.
func deltaWrites(before, after map[requestKey]float64) map[requestKey]float64 {
	out := map[requestKey]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// writeTotals sums writes of one class, successful and failed (non-2xx).
func writeTotals(writes map[requestKey]float64, class string) (ok, failed float64) {
	for k, v := range writes {
		if classify(k) != class {
			continue
		}
		if k.success() {
			ok += v
		} else {
			failed += v
		}
	}
	return ok, failed
}

// podDelete is a successful pod delete as apiserver_request_total counts it.
var podDelete = requestKey{verb: "DELETE", resource: "pods", code: "200"}

// attributeKubeletDeletes splits writes' successful pod deletes into
// molt's (the podcyclers' own count, byMolt) and the rest, which the local
// stack's kubelet stand-in (molt-devnode's reaper) issues to finish a
// graceful delete, as a kubelet does once the containers stopped.
func attributeKubeletDeletes(writes map[requestKey]float64, byMolt float64) {
	total := writes[podDelete]
	if byMolt > total {
		byMolt = total
	}
	if rest := total - byMolt; rest > 0 {
		writes[requestKey{verb: "DELETE", resource: "pods", code: "200", kubelet: true}] = rest
	}
	if byMolt > 0 {
		writes[podDelete] = byMolt
	} else {
		delete(writes, podDelete)
	}
}

// podcyclerDeletes sums molt_podcycler_pods_deleted_total over the
// podcyclers at addrs; the first address (the stack's own podcycler) must
// answer, the others (a run's extra replicas) may be gone.
func podcyclerDeletes(ctx context.Context, addrs []string) (float64, error) {
	var sum float64
	for i, addr := range addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if i == 0 {
				return 0, fmt.Errorf("scrape podcycler metrics at %s: %w", addr, err)
			}
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("read podcycler metrics at %s: %w", addr, err)
		}
		for line := range strings.SplitSeq(string(body), "\n") {
			if _, v, ok := parseSeries(line, "molt_podcycler_pods_deleted_total"); ok {
				sum += v
			}
		}
	}
	return sum, nil
}
