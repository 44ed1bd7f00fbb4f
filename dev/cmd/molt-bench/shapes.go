package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// shape is one upgrade the bench times: namespaces × perNamespace sandboxes,
// one ops per namespace, all ops created at once.
type shape struct {
	// key is the name --shapes selects the shape by.
	key            string
	title          string
	namespaces     int
	perNamespace   int
	maxUnavailable string
	// hookSeconds is how long a preUpgrade hook sleeps; 0 is no hook.
	hookSeconds int
	// replicas of patcher, hookrunner and podcycler during the run.
	replicas int
	// goalN is the size issue 12's goal and the reference controller's
	// time are for; goalWall and refWall are 0 where the issue gives none.
	goalN    int
	goalWall time.Duration
	refWall  time.Duration
}

func (s shape) sandboxes() int { return s.namespaces * s.perNamespace }

// defaultShapes and scaleShapes are what --shapes and --scale select.
const (
	defaultShapes = "100pct,10pct,one,hook"
	scaleShapes   = "10k,replicas-1,replicas-3"
)

// allShapes is the table of every shape the bench knows, for a base size n
// (issue 12's sizes are for n = 1000): "one" is n/10 sandboxes, "10k" is 10n
// across 20 namespaces, the replica runs are n/2.
func allShapes(n, hookN, hookSeconds int) []shape {
	tenth, half := max(1, n/10), max(1, n/2)
	return []shape{
		{key: "100pct", title: "image only, maxUnavailable 100%", namespaces: 1, perNamespace: n, maxUnavailable: "100%", replicas: 1,
			goalN: 1000, goalWall: 30 * time.Second, refWall: 50100 * time.Millisecond},
		{key: "10pct", title: "image only, maxUnavailable 10%", namespaces: 1, perNamespace: n, maxUnavailable: "10%", replicas: 1,
			goalN: 1000, goalWall: 27 * time.Second, refWall: 45100 * time.Millisecond},
		{key: "one", title: "image only, maxUnavailable 1", namespaces: 1, perNamespace: tenth, maxUnavailable: "1", replicas: 1,
			goalN: 100, goalWall: 31 * time.Second, refWall: 38500 * time.Millisecond},
		{key: "hook", title: fmt.Sprintf("%ds preUpgrade hook, maxUnavailable 100%%", hookSeconds), namespaces: 1, perNamespace: hookN,
			maxUnavailable: "100%", hookSeconds: hookSeconds, replicas: 1},
		{key: "10k", title: "20 namespaces, 20 ops at once, maxUnavailable 10%", namespaces: 20, perNamespace: half, maxUnavailable: "10%", replicas: 1,
			goalN: 10000},
		{key: "replicas-1", title: "1s preUpgrade hook, 1 replica", namespaces: 1, perNamespace: half, maxUnavailable: "100%", hookSeconds: 1, replicas: 1,
			goalN: 500},
		{key: "replicas-3", title: "1s preUpgrade hook, 3 replicas of patcher, hookrunner, podcycler", namespaces: 1, perNamespace: half,
			maxUnavailable: "100%", hookSeconds: 1, replicas: 3, goalN: 500},
	}
}

// selectShapes returns the shapes named in list, in the table's order; the
// hook run is left out when hookN is 0.
func selectShapes(list string, n, hookN, hookSeconds int) ([]shape, error) {
	all := allShapes(n, hookN, hookSeconds)
	var keys []string
	for _, k := range strings.Split(list, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if !slices.ContainsFunc(all, func(s shape) bool { return s.key == k }) {
			return nil, fmt.Errorf("flag --shapes: unknown shape %q (known: %s,%s)", k, defaultShapes, scaleShapes)
		}
		keys = append(keys, k)
	}
	var out []shape
	for _, s := range all {
		if slices.Contains(keys, s.key) && s.sandboxes() > 0 {
			out = append(out, s)
		}
	}
	return out, nil
}
