package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/kubernetes"

	"molt.dev/dev/devcluster"
	"molt.dev/pkg/events"
)

// apiserverWrites sums apiserver_request_total over the write verbs.
func apiserverWrites(ctx context.Context, kube kubernetes.Interface) (float64, error) {
	body, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("scrape kube-apiserver /metrics: %w", err)
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		write := false
		for _, v := range []string{`verb="POST"`, `verb="PUT"`, `verb="PATCH"`, `verb="DELETE"`} {
			if strings.Contains(line, v) {
				write = true
			}
		}
		if !write {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, nil
}

// natsLogin logs the bench in to NATS as the read-only user viewer.
var natsLogin nats.Option = func(*nats.Options) error { return nil }

func streamMessages(ctx context.Context, url string) (uint64, error) {
	nc, err := nats.Connect(url, natsLogin)
	if err != nil {
		return 0, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		return 0, fmt.Errorf("open stream %s: %w", events.StreamName, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info %s: %w", events.StreamName, err)
	}
	return info.State.Msgs, nil
}

// stageLatencies reads every event of the namespace from the stream and
// returns, per stage, how long each sandbox spent in it.
func stageLatencies(ctx context.Context, url, ns string) (map[string][]time.Duration, error) {
	nc, err := nats.Connect(url, natsLogin)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cons, err := js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.SubjectPrefix + "." + events.EncodeToken(ns) + ".>"}})
	if err != nil {
		return nil, fmt.Errorf("read history of %s: %w", ns, err)
	}
	times := map[string]map[string]time.Time{}
	for {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			return nil, err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			ev, err := events.Decode(msg.Data())
			if err != nil {
				continue
			}
			key := ev.SandboxKey()
			if times[key] == nil {
				times[key] = map[string]time.Time{}
			}
			if _, seen := times[key][ev.Type]; !seen {
				times[key][ev.Type] = ev.Time
			}
		}
		if n == 0 {
			break
		}
	}
	steps := []struct{ name, from, to string }{
		{"patch (requested→patched)", events.TypeRequested, events.TypePatched},
		{"preUpgrade (patched→prehook-done)", events.TypePatched, events.TypePreHookDone},
		{"upgradePod (prehook-done→pod-ready)", events.TypePreHookDone, events.TypePodReady},
		{"postUpgrade (pod-ready→posthook-done)", events.TypePodReady, events.TypePostHookDone},
		{"whole sandbox (requested→posthook-done)", events.TypeRequested, events.TypePostHookDone},
	}
	out := map[string][]time.Duration{}
	for _, ts := range times {
		for _, s := range steps {
			from, ok1 := ts[s.from]
			to, ok2 := ts[s.to]
			if ok1 && ok2 {
				out[s.name] = append(out[s.name], to.Sub(from))
			}
		}
	}
	return out, nil
}

// peakRSS reads VmHWM of every process the local stack started.
func peakRSS(pidDir string) map[string]string {
	out := map[string]string{}
	pids, err := devcluster.ReadPidFiles(pidDir)
	if err != nil {
		return out
	}
	for _, p := range pids {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.Pid), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				out[p.Name] = strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:"))
			}
		}
	}
	return out
}

func writeResults(c config, runs []runResult, floor floorResult, rss map[string]string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# molt bench results\n\n%s, %d sandboxes, image-only patch, no hooks.\n\n", time.Now().UTC().Format(time.RFC3339), c.n)
	fmt.Fprintf(&b, "Floor: the minimal writes of one upgrade (patch sandbox, delete pod, create pod, 2 status writes) for %d sandboxes, issued directly with client-go at full concurrency: **%s** (%.0f writes/s).\n\n",
		c.n, floor.wall.Round(time.Millisecond), float64(floor.writes*c.n)/floor.wall.Seconds())
	b.WriteString("| run | sandboxes | maxUnavailable | result | apply → done | ratio to floor | API writes / sandbox | events | events/s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range runs {
		ratio := fmt.Sprintf("%.2f×", r.wall.Seconds()/floor.wall.Seconds())
		if r.n != c.n {
			ratio = "n/a"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %.1f | %d | %.0f |\n", r.name(c), r.n, r.maxUnavailable, r.phase, r.wall.Round(time.Millisecond),
			ratio, r.writes/float64(r.n), r.events, float64(r.events)/r.wall.Seconds())
	}
	for _, r := range runs {
		fmt.Fprintf(&b, "\n## Stage latency, %s\n\n| stage | n | p50 | p90 | p99 | max |\n| --- | --- | --- | --- | --- | --- |\n", r.name(c))
		for _, name := range sortedKeys(r.stages) {
			d := r.stages[name]
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", name, len(d), percentile(d, 0.5).Round(time.Millisecond),
				percentile(d, 0.9).Round(time.Millisecond), percentile(d, 0.99).Round(time.Millisecond), percentile(d, 1).Round(time.Millisecond))
		}
	}
	b.WriteString("\n## Peak RSS (VmHWM) per process\n\n| process | peak RSS |\n| --- | --- |\n")
	for _, name := range sortedKeys(rss) {
		fmt.Fprintf(&b, "| %s | %s |\n", name, rss[name])
	}
	return os.WriteFile(c.out, []byte(b.String()), 0o644)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (r runResult) name(c config) string {
	if r.hook {
		return fmt.Sprintf("%ds preUpgrade hook", c.hookSleep)
	}
	return "image only, maxUnavailable " + r.maxUnavailable
}
