package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1alpha1 "molt.dev/pkg/apis/agents/v1alpha1"
)

// faultsReport is what the faults run found.
type faultsReport struct {
	cfg       faultsConfig
	ns        string
	wall      time.Duration
	kills     []faultKill
	crashed   map[string]int
	final     *agentsv1alpha1.SandboxUpdateOps
	decreases []string
	// violations by invariant, each a list of "sandbox: what".
	violations map[string][]string
	checked    int
}

// The invariants, in the report's order.
var faultInvariants = []string{
	"the ops ends Completed with exact counters",
	"updatedReplicas never goes down",
	"no service exits unless killed",
	"the sandbox ends Succeeded",
	"its pod is recreated exactly once, on the new image",
	"preUpgrade runs exactly once, on the original pod, before the new pod exists",
	"postUpgrade runs on the new pod",
	"the workspace survives",
}

func (r *faultsReport) add(inv, what string) {
	if r.violations == nil {
		r.violations = map[string][]string{}
	}
	r.violations[inv] = append(r.violations[inv], what)
}

func (r *faultsReport) broken() int {
	n := 0
	for _, v := range r.violations {
		n += len(v)
	}
	return n
}

// check reads every sandbox, its pod and its hook records.
func (r *faultsReport) check(ctx context.Context, b *bench, names []string, oldUID map[string]string, created map[string][]string) {
	n := int32(len(names))
	switch st := r.final; {
	case st == nil:
		r.add(faultInvariants[0], "the ops could not be read")
	case st.Status.Phase != agentsv1alpha1.SandboxUpdateOpsCompleted:
		r.add(faultInvariants[0], fmt.Sprintf("phase %q after %s", st.Status.Phase, r.wall.Round(time.Second)))
	case st.Status.Replicas != n || st.Status.UpdatedReplicas != n || st.Status.UpdatingReplicas != 0 || st.Status.FailedReplicas != 0:
		r.add(faultInvariants[0], fmt.Sprintf("replicas %d updated %d updating %d failed %d, want %d %d 0 0",
			st.Status.Replicas, st.Status.UpdatedReplicas, st.Status.UpdatingReplicas, st.Status.FailedReplicas, n, n))
	}
	for _, d := range r.decreases {
		r.add(faultInvariants[1], d)
	}
	for name, times := range r.crashed {
		r.add(faultInvariants[2], fmt.Sprintf("%s exited on its own %d times", name, times))
	}
	var mu sync.Mutex
	add := func(inv, name, what string) {
		mu.Lock()
		defer mu.Unlock()
		r.add(inv, name+": "+what)
	}
	_ = parallel(ctx, len(names), 16, func(i int) error {
		name := names[i]
		mu.Lock()
		r.checked++
		mu.Unlock()
		r.checkSandbox(ctx, b, name, oldUID[name], created[name], func(inv int, what string) { add(faultInvariants[inv], name, what) })
		return nil
	})
	for _, v := range r.violations {
		sort.Strings(v)
	}
}

func (r *faultsReport) checkSandbox(ctx context.Context, b *bench, name, oldUID string, created []string, bad func(inv int, what string)) {
	sb, err := b.agents.AgentsV1alpha1().Sandboxes(r.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		bad(3, fmt.Sprintf("get sandbox: %v", err))
		return
	}
	switch c := meta.FindStatusCondition(sb.Status.Conditions, agentsv1alpha1.ConditionUpgrading); {
	case c == nil:
		bad(3, fmt.Sprintf("no Upgrading condition (phase %s)", sb.Status.Phase))
	case c.Reason != agentsv1alpha1.UpgradingReasonSucceeded:
		bad(3, fmt.Sprintf("Upgrading %s: %s (phase %s)", c.Reason, c.Message, sb.Status.Phase))
	}
	pod, err := b.kube.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		bad(4, fmt.Sprintf("get pod: %v", err))
		return
	}
	switch {
	case string(pod.UID) == oldUID:
		bad(4, "the pod was not recreated")
		return
	case len(created) != 1:
		bad(4, fmt.Sprintf("%d pods created, want 1 (%s)", len(created), strings.Join(created, ", ")))
	case created[0] != string(pod.UID):
		bad(4, fmt.Sprintf("the pod created during the run (%s) is not the pod now (%s)", created[0], pod.UID))
	}
	if img := pod.Spec.Containers[0].Image; img != faultsImage {
		bad(4, "pod image "+img)
	}
	out, err := b.sh(ctx, r.ns, name, "cat /mnt/shared/hook-runs")
	if err != nil {
		bad(5, fmt.Sprintf("read /mnt/shared/hook-runs: %v", err))
		return
	}
	pres, posts := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[1] != name {
			bad(5, fmt.Sprintf("malformed hook record %q", line))
			continue
		}
		ts, _ := strconv.ParseFloat(f[3], 64)
		switch f[0] {
		case "pre":
			pres++
			if f[2] != "original" {
				bad(5, "ran on a new pod: "+line)
			}
			if created := float64(pod.CreationTimestamp.Unix()); ts > created+1 {
				bad(5, fmt.Sprintf("ran at %.3f, after the new pod's creation at %.0f: %s", ts, created, line))
			}
		case "post":
			posts++
			if f[2] != "NEW" {
				bad(6, "ran on the original pod: "+line)
			}
		default:
			bad(5, fmt.Sprintf("unknown hook record %q", line))
		}
	}
	if pres != 1 {
		bad(5, fmt.Sprintf("%d runs, want 1", pres))
	}
	if posts == 0 {
		bad(6, "never ran")
	}
	got, err := b.sh(ctx, r.ns, name, "cat /home/user/workspace/sub/file.txt")
	if got = strings.TrimSpace(got); err != nil || got != "data-"+name {
		bad(7, fmt.Sprintf("workspace file %q (%v), want data-%s", got, err, name))
	}
}

func (r *faultsReport) markdown() string {
	var s strings.Builder
	verdict := "every invariant held"
	if n := r.broken(); n > 0 {
		verdict = fmt.Sprintf("**%d violations**", n)
	}
	fmt.Fprintf(&s, "# molt faults at scale\n\n%s. Written by `make bench-faults` (dev/cmd/molt-bench --faults).\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&s, "%d sandboxes with a backup (preUpgrade, %ds) and a restore (postUpgrade) hook upgrade at maxUnavailable 100%% "+
		"on the local stack with its production deadlines, while molt's five services and NATS are killed with SIGKILL in turn, "+
		"one every %s, and started again %s later with the same command line", r.checked, r.cfg.hookSeconds, r.cfg.every, r.cfg.down)
	if r.cfg.wipeNATS {
		s.WriteString("; NATS's second kill also removes its store (the stream, its messages and the consumers are lost)")
	}
	fmt.Fprintf(&s, ".\n\nResult: %s. The ops ended %s after %s and %d kills.\n\n", verdict, phaseOf(r.final), r.wall.Round(time.Second), len(r.kills))
	s.WriteString("| invariant | violations |\n| --- | --- |\n")
	for _, inv := range faultInvariants {
		fmt.Fprintf(&s, "| %s | %d |\n", inv, len(r.violations[inv]))
	}
	for _, inv := range faultInvariants {
		v := r.violations[inv]
		if len(v) == 0 {
			continue
		}
		fmt.Fprintf(&s, "\n## %s: %d\n\n", inv, len(v))
		for i, line := range v {
			if i == 20 {
				fmt.Fprintf(&s, "- … %d more\n", len(v)-20)
				break
			}
			fmt.Fprintf(&s, "- %s\n", line)
		}
	}
	s.WriteString("\n## Kills\n\n| # | after the ops was created | process | |\n| --- | --- | --- | --- |\n")
	for i, k := range r.kills {
		note := ""
		if k.wiped {
			note = "store removed"
		}
		if k.err != "" {
			note = strings.TrimSpace(note + " " + k.err)
		}
		fmt.Fprintf(&s, "| %d | %s | %s | %s |\n", i+1, k.at.Round(time.Millisecond), k.victim, note)
	}
	return s.String()
}
