package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeListsShapes keeps the README's table of shapes in step with
// allShapes and the flags' defaults.
func TestReadmeListsShapes(t *testing.T) {
	data, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "## Benchmarks\n")
	if start < 0 {
		t.Fatal("README.md has no section ## Benchmarks")
	}
	section := text[start+len("## Benchmarks\n"):]
	section = section[:strings.Index(section, "\n## ")]
	var inReadme []string
	for _, m := range regexp.MustCompile("(?m)^\\| ((?:`[a-z0-9-]+`(?:, )?)+) \\|").FindAllStringSubmatch(section, -1) {
		for _, k := range strings.Split(m[1], ", ") {
			inReadme = append(inReadme, strings.Trim(k, "`"))
		}
	}
	var inCode []string
	for _, s := range allShapes(1000, 50, 2) {
		inCode = append(inCode, s.key)
	}
	if !slices.Equal(inReadme, inCode) {
		t.Errorf("README's Benchmarks table lists shapes %v, the code has %v", inReadme, inCode)
	}
	if got := strings.Join(inCode, ","); got != defaultShapes+","+scaleShapes {
		t.Errorf("defaultShapes,scaleShapes = %s,%s; want every shape once, in the table's order: %s", defaultShapes, scaleShapes, got)
	}
}

func TestSelectShapes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		list  string
		hookN int
		want  []string
		err   bool
	}{
		{"defaults", defaultShapes, 50, []string{"100pct", "10pct", "one", "hook"}, false},
		{"no hook run", defaultShapes, 0, []string{"100pct", "10pct", "one"}, false},
		{"table order, spaces", " one ,100pct", 50, []string{"100pct", "one"}, false},
		{"unknown", "100pct,fast", 50, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := selectShapes(tc.list, 1000, tc.hookN, 2)
			if (err != nil) != tc.err {
				t.Fatalf("selectShapes(%q) error = %v, want error %v", tc.list, err, tc.err)
			}
			var keys []string
			for _, s := range got {
				keys = append(keys, s.key)
			}
			if !slices.Equal(keys, tc.want) {
				t.Errorf("selectShapes(%q) = %v, want %v", tc.list, keys, tc.want)
			}
		})
	}
	one, _ := selectShapes("one,10k", 1000, 0, 2)
	if one[0].sandboxes() != 100 || one[0].maxUnavailable != "1" || one[1].sandboxes() != 10000 || one[1].namespaces != 20 {
		t.Errorf("one and 10k at n=1000 = %+v", one)
	}
}
