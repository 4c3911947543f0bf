package layers

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// section is the text of docs/architecture.md between the heading named
// from and the next heading of the same level.
func section(t *testing.T, doc []byte, from string) string {
	t.Helper()
	_, after, ok := bytes.Cut(doc, []byte("\n## "+from+"\n"))
	if !ok {
		t.Fatalf("docs/architecture.md has no %q section", from)
	}
	body, _, _ := bytes.Cut(after, []byte("\n## "))
	return string(body)
}

// mapPackages are the package paths the package map's tables name: the
// back-quoted paths in each row's first cell, and in the state machines'
// table, its package cell.
func mapPackages(text string) []string {
	path := regexp.MustCompile("`([a-z0-9_]+(?:/[a-z0-9_]+)*/?)`")
	var out []string
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		cell := cells[1]
		if len(cells) >= 5 { // state machine | package | driven by
			cell = cells[2]
		}
		for _, m := range path.FindAllStringSubmatch(cell, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// TestThePackageMapIsTrue: every package of the module has a row in
// docs/architecture.md's map, and every path a row names is a package or
// a folder of the module.
func TestThePackageMapIsTrue(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := mapPackages(section(t, doc, "Two state machines and their drivers"))
	graph := moduleGraph(t, root)
	for pkg := range graph {
		if !slices.Contains(named, pkg) {
			t.Errorf("package %s has no row in docs/architecture.md's package map", pkg)
		}
	}
	seen := map[string]bool{}
	for _, p := range named {
		if seen[p] {
			t.Errorf("docs/architecture.md's package map names %s twice", p)
		}
		seen[p] = true
		if _, ok := graph[p]; ok {
			continue
		}
		if info, err := os.Stat(filepath.Join(root, p)); err != nil || !info.IsDir() || !strings.HasSuffix(p, "/") {
			t.Errorf("docs/architecture.md's package map names %s, which is no package of the module (nor a folder, written with a trailing /)", p)
		}
	}
}

// arrows are the "Who calls whom" lines: a package, and what it imports
// (X/... for X and the packages under it).
func arrows(t *testing.T, doc []byte) map[string][]string {
	t.Helper()
	fenced, err := fencedBlock(doc, "Who calls whom")
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	block := string(fenced)
	arrow := regexp.MustCompile(`^(\S+) ─+> (.*?)(?:\s+\(.*\))?$`)
	out := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		m := arrow.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("Who calls whom: line %q is not \"PKG ──> PKG, PKG, ...\"", line)
		}
		out[m[1]] = strings.Split(m[2], ", ")
	}
	return out
}

// covers reports whether the drawn destination d stands for package p.
func covers(d, p string) bool {
	if base, ok := strings.CutSuffix(d, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return d == p
}

// TestWhoCallsWhomIsTrue: each line of docs/architecture.md's "Who calls
// whom" draws exactly its package's imports within the module: no arrow
// that is not an import, no import without an arrow.
func TestWhoCallsWhomIsTrue(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	graph := moduleGraph(t, root)
	drawn := arrows(t, doc)
	if len(drawn) < 10 {
		t.Fatalf("Who calls whom draws %d packages: not the diagram", len(drawn))
	}
	for src, dsts := range drawn {
		imports, ok := graph[src]
		if !ok {
			t.Errorf("Who calls whom draws %s, which is no package of the module", src)
			continue
		}
		for _, d := range dsts {
			if !slices.ContainsFunc(imports, func(p string) bool { return covers(d, p) }) {
				t.Errorf("Who calls whom draws %s ──> %s, but %s imports no such package", src, d, src)
			}
		}
		for _, p := range imports {
			if !slices.ContainsFunc(dsts, func(d string) bool { return covers(d, p) }) {
				t.Errorf("%s imports %s, which Who calls whom does not draw", src, p)
			}
		}
	}
}
