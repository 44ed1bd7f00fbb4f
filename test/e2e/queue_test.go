package e2e

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"molt.dev/dev/testenv"
)

// TestHooksQueuedPastTheirDeadlinesAreNotFailed: hookrunner runs one preUpgrade hook at
// a time (--max-hooks=1), and 16 sandboxes are admitted at once, each with a 1s backup. The
// later ones wait at hookrunner's consumer far longer than PreUpgrade's deadline (patch 1s +
// hook 2s + margin 1s, so re-driven twice and failed after about 12s before this was
// fixed). The watchdog sees their `patched` still queued at a consumer that works through
// its queue and leaves them alone: every sandbox is upgraded once, backed up once on its
// original pod and restored on the new one, and the ops completes 16/16. The restores
// have a consumer of their own: the first sandboxes are restored while later ones still
// wait for their backups, not after every backup.
func TestHooksQueuedPastTheirDeadlinesAreNotFailed(t *testing.T) {
	const (
		sandboxes = 16
		opsName   = "q"
		pool      = "q-pool"
		image     = "my-registry/sandbox-image:v2"
		horizon   = 12 * time.Second // when the watchdog would have failed a stalled PreUpgrade
	)
	ns := testenv.Get(t).Namespace(t)
	s := OwnStack(t, stackOptions{env: []string{
		"MOLT_HOOKRUNNER_MAX_HOOKS=1", "MOLT_STATUSAGG_PATCH_TIMEOUT=1s", "MOLT_STATUSAGG_HOOK_MARGIN=1s",
	}})
	names := workspaceSandboxes(t, s, ns, "q", pool, "/mnt/shared", "/data/"+ns+"/$NAME/shared", sandboxes)
	markOriginals(t, s, ns, names)
	oldUID := podUIDs(t, s, ns, names)
	w := watch(t, s, ns)

	// Sample statusagg's molt_stages_queued_past_deadline{stage="PreUpgrade"}: it must see
	// stages held past their deadline, or this test proves nothing.
	var maxQueued atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := queuedPastDeadline(s.MetricsURL("statusagg"), "PreUpgrade"); n > maxQueued.Load() {
				maxQueued.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()

	start := time.Now()
	kubectl(t, chaosOpsYAMLFor(opsName, pool, "100%", image, 2), "apply", "-n", ns, "-f", "-")
	final := waitEnded(t, s, ns, opsName, 3*time.Minute)
	took := time.Since(start)
	close(stop)
	<-sampled
	t.Logf("ops ended after %s; at most %d sandboxes were held in PreUpgrade past its deadline at once", took.Round(time.Second), maxQueued.Load())
	assertCounters(t, final, sandboxes)
	if took < horizon {
		t.Errorf("the ops took %s, less than the %s after which a stalled PreUpgrade fails: the test proves nothing", took, horizon)
	}
	if maxQueued.Load() == 0 {
		t.Error("statusagg never reported a PreUpgrade held past its deadline (molt_stages_queued_past_deadline): the test proves nothing")
	}

	_, _, adds := w.snapshot()
	problems := map[string][]string{}
	var firstPost, lastPre float64
	for _, n := range names {
		problems[n] = hookedUpgradeProblems(t, s, ns, n, hookedUpgrade{image: image, oldUID: oldUID[n], adds: adds[n], onePost: true})
		out, _ := sh(t, s, ns, n, "cat /mnt/shared/pre-runs")
		lines, _ := parseChaosHookLines(out)
		for _, l := range lines {
			switch {
			case l.kind == "pre" && l.ts > lastPre:
				lastPre = l.ts
			case l.kind == "post" && (firstPost == 0 || l.ts < firstPost):
				firstPost = l.ts
			}
		}
	}
	reportProblems(t, s, problems)
	if firstPost == 0 || firstPost >= lastPre {
		t.Errorf("the first restore ran at %.3f, not before the last backup at %.3f: postUpgrade waited behind every preUpgrade", firstPost, lastPre)
	}
	assertNoneExited(t, s)
}

// queuedPastDeadline reads molt_stages_queued_past_deadline{stage} from statusagg's
// metrics at url; 0 if it cannot.
func queuedPastDeadline(url, stage string) int64 {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0
	}
	f, ok := families["molt_stages_queued_past_deadline"]
	if !ok {
		return 0
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "stage" && l.GetValue() == stage {
				return int64(m.GetGauge().GetValue())
			}
		}
	}
	return 0
}
