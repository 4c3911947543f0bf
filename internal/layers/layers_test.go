package layers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// rules are the layer rules as docs/architecture.md states them.
type rules struct {
	// layer of each top-level folder, and of the folders under one that
	// have a layer of their own: a package may import module packages of
	// its own folder or of a folder on a lower layer, nothing else.
	layer map[string]int
	// pure packages may import only the module packages listed for them
	// (and the standard library and outside modules).
	pure map[string][]string
	// sides of one folder (X/... is X and the packages under it): a
	// package of one side reaches no package of another through its
	// imports, direct or not.
	sides map[string][]string
}

// parseRules reads the fenced block that follows the "## Layer rules"
// heading: lines "layer N: folder folder ...", "pure PKG: PKG PKG ..." and
// "side NAME: PKG PKG/... ...".
func parseRules(doc []byte) (rules, error) {
	r := rules{layer: map[string]int{}, pure: map[string][]string{}, sides: map[string][]string{}}
	block, err := fencedBlock(doc, "Layer rules")
	if err != nil {
		return r, err
	}
	sc := bufio.NewScanner(bytes.NewReader(block))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		head, list, ok := strings.Cut(line, ":")
		if !ok {
			return r, fmt.Errorf("rule %q: want \"layer N: folders\", \"pure pkg: pkgs\" or \"side name: pkgs\"", line)
		}
		kind, arg, _ := strings.Cut(strings.TrimSpace(head), " ")
		switch kind {
		case "layer":
			n, err := strconv.Atoi(arg)
			if err != nil {
				return r, fmt.Errorf("rule %q: layer number: %v", line, err)
			}
			for _, f := range strings.Fields(list) {
				if _, dup := r.layer[f]; dup {
					return r, fmt.Errorf("folder %s is on two layers", f)
				}
				r.layer[f] = n
			}
		case "pure":
			r.pure[arg] = strings.Fields(list)
		case "side":
			if _, dup := r.sides[arg]; dup || arg == "" {
				return r, fmt.Errorf("rule %q: a side needs a name of its own", line)
			}
			r.sides[arg] = strings.Fields(list)
		default:
			return r, fmt.Errorf("rule %q: unknown kind %q", line, kind)
		}
	}
	return r, sc.Err()
}

// check returns every import of graph (package -> module packages it
// imports, paths relative to the module) that breaks the rules.
func (r rules) check(graph map[string][]string) []string {
	var bad []string
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		from := r.folderOf(p)
		lf, ok := r.layer[from]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: its folder %s is on no layer; add it to docs/architecture.md's Layer rules", p, from))
			continue
		}
		for _, q := range graph[p] {
			to := r.folderOf(q)
			lt, ok := r.layer[to]
			switch {
			case !ok:
				bad = append(bad, fmt.Sprintf("%s imports %s, whose folder %s is on no layer", p, q, to))
			case to != from && lt >= lf:
				bad = append(bad, fmt.Sprintf("%s (layer %d) imports %s (layer %d): a package may import only its own folder or lower layers", p, lf, q, lt))
			}
			if allowed, isPure := r.pure[p]; isPure && !slices.Contains(allowed, q) {
				bad = append(bad, fmt.Sprintf("%s is pure and may import only %v of the module, not %s", p, allowed, q))
			}
		}
	}
	return append(bad, r.checkSides(graph)...)
}

// sideOf is the side whose list covers pkg, or "".
func (r rules) sideOf(pkg string) string {
	for name, pkgs := range r.sides {
		if slices.ContainsFunc(pkgs, func(d string) bool { return covers(d, pkg) }) {
			return name
		}
	}
	return ""
}

// checkSides returns every package of a side that reaches a package of
// another side, with the chain of imports, and every entry of a side that
// names no package of graph (a rule about nothing checks nothing).
func (r rules) checkSides(graph map[string][]string) []string {
	var bad []string
	pkgs := slices.Sorted(maps.Keys(graph))
	for _, name := range slices.Sorted(maps.Keys(r.sides)) {
		for _, d := range r.sides[name] {
			if !slices.ContainsFunc(pkgs, func(p string) bool { return covers(d, p) }) {
				bad = append(bad, fmt.Sprintf("side %s names %s, which is no package of the module", name, d))
			}
		}
	}
	for _, p := range pkgs {
		from := r.sideOf(p)
		if from == "" {
			continue
		}
		chain := importChain(graph, p, func(q string) bool {
			s := r.sideOf(q)
			return s != "" && s != from
		})
		if chain != nil {
			q := chain[len(chain)-1]
			bad = append(bad, fmt.Sprintf("%s (the %s side) imports %s (the %s side): %s; what both sides use belongs in a package of neither",
				p, from, q, r.sideOf(q), strings.Join(chain, " -> ")))
		}
	}
	return bad
}

// importChain is the shortest chain of imports from the package from to a
// package that matches, both included, or nil if there is none.
func importChain(graph map[string][]string, from string, match func(string) bool) []string {
	parent := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, q := range graph[p] {
			if _, seen := parent[q]; seen {
				continue
			}
			parent[q] = p
			if match(q) {
				chain := []string{q}
				for at := p; at != ""; at = parent[at] {
					chain = append(chain, at)
				}
				slices.Reverse(chain)
				return chain
			}
			queue = append(queue, q)
		}
	}
	return nil
}

// fencedBlock is the first fenced block after the "## heading" line of
// doc.
func fencedBlock(doc []byte, heading string) ([]byte, error) {
	_, after, ok := bytes.Cut(doc, []byte("\n## "+heading+"\n"))
	if !ok {
		return nil, fmt.Errorf("no %q section", "## "+heading)
	}
	_, block, ok := bytes.Cut(after, []byte("```\n"))
	if !ok {
		return nil, fmt.Errorf("no fenced block in the %s section", heading)
	}
	block, _, ok = bytes.Cut(block, []byte("```"))
	if !ok {
		return nil, fmt.Errorf("unterminated fenced block in the %s section", heading)
	}
	return block, nil
}

// folderOf is the folder whose layer pkg is on: the longest folder the
// rules name that holds pkg (a folder under a top-level one may be given a
// layer of its own, as shared ground under both sides), else pkg's
// top-level folder.
func (r rules) folderOf(pkg string) string {
	best := ""
	for f := range r.layer {
		if (pkg == f || strings.HasPrefix(pkg, f+"/")) && len(f) > len(best) {
			best = f
		}
	}
	if best == "" {
		best, _, _ = strings.Cut(pkg, "/")
	}
	return best
}

// moduleGraph lists the module's packages and the module packages each
// imports, without tests' imports, relative to the module path.
func moduleGraph(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Module", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -json ./...: %v\n%s", err, stderr.Bytes())
	}
	type pkg struct {
		ImportPath string
		Imports    []string
		Module     *struct {
			Path string
			Main bool
		}
	}
	var mod string
	var all []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decoding go list's output: %v", err)
		}
		if p.Module != nil && p.Module.Main {
			mod = p.Module.Path
		}
		all = append(all, p)
	}
	if mod == "" {
		t.Fatal("go list named no main module")
	}
	rel := func(path string) (string, bool) {
		r, ok := strings.CutPrefix(path, mod+"/")
		return r, ok
	}
	graph := map[string][]string{}
	for _, p := range all {
		from, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		graph[from] = []string{}
		for _, imp := range p.Imports {
			if to, ok := rel(imp); ok {
				graph[from] = append(graph[from], to)
			}
		}
	}
	return graph
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func loadRules(t *testing.T, root string) rules {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseRules(doc)
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	return r
}

// TestImportsFollowTheLayerRules is the check itself: every import in the
// module keeps to docs/architecture.md's Layer rules.
func TestImportsFollowTheLayerRules(t *testing.T) {
	root := moduleRoot(t)
	r := loadRules(t, root)
	graph := moduleGraph(t, root)
	if _, ok := graph["switchml"]; !ok {
		t.Fatalf("go list found no switchml package among %d: the graph is not the module's", len(graph))
	}
	for _, b := range r.check(graph) {
		t.Error(b)
	}
}

// withImport is a copy of graph in which from imports to as well.
func withImport(t *testing.T, graph map[string][]string, from, to string) map[string][]string {
	t.Helper()
	if _, ok := graph[from]; !ok {
		t.Fatalf("no package %s in the graph", from)
	}
	g := map[string][]string{}
	for p, imps := range graph {
		g[p] = slices.Clone(imps)
	}
	g[from] = append(g[from], to)
	return g
}

// TestTheCheckCatchesUpwardImports adds the imports the rules forbid to the
// real graph, one at a time, and wants each one reported.
func TestTheCheckCatchesUpwardImports(t *testing.T) {
	root := moduleRoot(t)
	r := loadRules(t, root)
	graph := moduleGraph(t, root)
	for _, c := range []struct{ from, to string }{
		{"switchml", "p4/softswitch"},      // the worker's library reaching into the switch side
		{"p4/controller", "switchml"},      // the switch side reaching into the library
		{"wire", "switchml/engine"},        // shared ground importing a side
		{"p4/pipeline", "transport"},       // a pure state machine importing sockets
		{"benchmarks", "cmd/switchml"},     // a library importing the CLI
		{"internal/harness", "benchmarks"}, // the harness importing the suite it serves
		{"switchml/engine", "p4/pipeline"}, // one state machine importing the other
		{"switchml", "internal/harness"},   // a side reaching into internal/, beside the folder of its own layer
		{"internal/backoff", "switchml"},   // that folder importing a side above it
		{"internal/backoff", "wire"},       // or anything of the module: it is pure
	} {
		g := withImport(t, graph, c.from, c.to)
		bad := r.check(g)
		found := false
		for _, b := range bad {
			if strings.HasPrefix(b, c.from+" ") && strings.Contains(b, c.to) {
				found = true
			}
		}
		if !found {
			t.Errorf("adding the import %s -> %s was not reported (reported: %q)", c.from, c.to, bad)
		}
	}
}

// TestTheSidesCheckCatchesAnImport plants, one at a time, an import that
// joins the switch's side of p4/ to the controller's, directly or through
// a package both use, and wants the check to report it with the side it
// reaches.
func TestTheSidesCheckCatchesAnImport(t *testing.T) {
	root := moduleRoot(t)
	r := loadRules(t, root)
	graph := moduleGraph(t, root)
	if bad := r.checkSides(graph); len(bad) > 0 {
		t.Fatalf("the module breaks the sides rule before any import is planted: %q", bad)
	}
	for _, c := range []struct{ from, to, reported string }{
		{"p4/softswitch", "p4/controller", "p4/softswitch "},                // the switch reaching into the controller
		{"p4/dataplane", "p4/controller/p4rt", "p4/dataplane "},             // a sub-package of a side
		{"p4/controller", "p4/softswitch", "p4/controller "},                // and the other way
		{"p4/controller/jobcore", "p4/dataplane", "p4/controller/jobcore "}, // the core reaching the switch's loop
		{"p4/softswitch/softswitchtest", "p4/controller", "p4/softswitch/"}, // a test switch that ships
		{"p4/p4info", "p4/controller/p4rt", "p4/softswitch "},               // through a package both use
		{"p4/targets", "p4/softswitch", "p4/controller "},                   // and back through another
	} {
		g := withImport(t, graph, c.from, c.to)
		bad := r.checkSides(g)
		if !slices.ContainsFunc(bad, func(b string) bool {
			return strings.HasPrefix(b, c.reported) && strings.Contains(b, c.from+" -> "+c.to)
		}) {
			t.Errorf("adding the import %s -> %s was not reported as %s... (reported: %q)", c.from, c.to, c.reported, bad)
		}
	}
	// A side that names no package would make the rule check nothing.
	typo := rules{sides: map[string][]string{"switch": {"p4/softswich"}, "controller": {"p4/controller/..."}}}
	if bad := typo.checkSides(graph); len(bad) != 1 || !strings.Contains(bad[0], "p4/softswich") {
		t.Errorf("a side naming no package was not reported alone: %q", bad)
	}
}

// heavyModules are the outside modules that the library `go get` users
// import, and a program that embeds the switch, must not pull in: they come
// with optional parts (gorgonia tensors, the AF_XDP transport), each in a
// package of its own that a program imports when it wants it.
var heavyModules = []string{"gorgonia.org/", "github.com/apache/arrow", "github.com/cilium/ebpf", "github.com/vishvananda/"}

// lightPackages are what a program imports to join jobs (switchml) or to
// embed the switch side (p4/local, p4/softswitch), with the optional
// package that brings each heavy part in.
var lightPackages = []string{"switchml", "p4/local", "p4/softswitch"}

// TestTheLibraryIsLight: the library and the embedded switch, with what
// they import, pull in none of heavyModules; the packages that do are
// named.
func TestTheLibraryIsLight(t *testing.T) {
	root := moduleRoot(t)
	for _, pkg := range lightPackages {
		cmd := exec.Command("go", "list", "-deps", "./"+pkg)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, "google.golang.org/grpc") {
			t.Fatalf("go list -deps ./%s lists %d packages without grpc: not the package's graph", pkg, len(deps))
		}
		for _, h := range heavyModules {
			var heavy []string
			for _, d := range deps {
				if strings.HasPrefix(d, h) {
					heavy = append(heavy, d)
				}
			}
			if len(heavy) > 0 {
				t.Errorf("package %s depends on %d packages of %s (%s, ...): keep them behind an optional package (switchml/tensor, transport/afxdp) that programs import when they want it", pkg, len(heavy), h, heavy[0])
			}
		}
	}
}
