package programs

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/p4/p4tools"
)

// envUpdateBfrt, set to 1, makes TestBfrtJSONCheckedIn write the
// compiler's bfrt.json files over the checked-in ones.
const envUpdateBfrt = "SWITCHML_UPDATE_BFRT"

// The Stratum stand-in of p4/stratum's tests maps P4Info ids to BF Runtime
// ids from the bfrt.json bf-p4c writes, as stratum_bfrt does; it serves
// the checked-in copies (gzipped, a few kB each), which must be what the
// compiler writes for the programs.
func TestBfrtJSONCheckedIn(t *testing.T) {
	for _, c := range []struct {
		file string
		out  func(t *testing.T) *compiled
	}{
		{"tofino", compiledTNA},
		{"tofino2", compiledTofino2},
		{"tofino2-leaf", func(t *testing.T) *compiled {
			c := bfp4cLeaf(p4tools.ForTest(t), leafSource(t), "tofino2-leaf", "tofino2", "t2na")
			return c.get(t)
		}},
	} {
		t.Run(c.file, func(t *testing.T) {
			compiledJSON, err := os.ReadFile(filepath.Join(c.out(t).dir, "out", "bfrt.json"))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("..", "stratum", "testdata", c.file+".bfrt.json.gz")
			if os.Getenv(envUpdateBfrt) == "1" {
				writeGzip(t, path, compiledJSON)
			}
			if differ := bfrtDiffer(t, readGzip(t, path), compiledJSON); len(differ) > 0 {
				t.Errorf("%s is not the bfrt.json bf-p4c writes for this program (objects that differ: %s): run this test with %s=1 to replace it",
					path, strings.Join(differ, ", "), envUpdateBfrt)
			}
		})
	}
}

// bfrtDiffer compares two bfrt.json files on what a compile of the same
// source always writes, and returns the names of the objects (tables, or
// top-level keys) that differ.
//
// bf-p4c adds the objects of the pipeline's debug snapshot (table_type
// SnapshotCfg, SnapshotTrigger, SnapshotData, SnapshotLiveness: one set
// per gress, which the program does not declare and its P4Info does not
// name). It lists the ingress and egress sets in an order that changes
// from one run of the same compiler on the same source to the next, and
// gives the SnapshotCfg object an id made from whichever set comes first,
// with its depends_on in that order. So the snapshot objects are compared
// by name, without the SnapshotCfg id or the order of its depends_on;
// everything else is compared as written, in order. The Stratum stand-in
// maps P4Info entities to bfrt.json objects, never to the snapshot's.
func bfrtDiffer(t *testing.T, want, got []byte) []string {
	t.Helper()
	w, g := stableBfrt(t, want), stableBfrt(t, got)
	var differ []string
	for _, k := range slices.Sorted(maps.Keys(w)) {
		if _, ok := g[k]; !ok || !bytes.Equal(w[k], g[k]) {
			differ = append(differ, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(g)) {
		if _, ok := w[k]; !ok {
			differ = append(differ, k)
		}
	}
	return differ
}

// stableBfrt splits a bfrt.json into what bfrtDiffer compares: each
// object of "tables" under "table NAME", the program's objects' names in
// the order written under "table order", and each other top-level key
// under its own name; values in a canonical JSON form (keys sorted,
// numbers as written), since readers of bfrt.json go by key.
func stableBfrt(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("bfrt.json: %v", err)
	}
	canonical := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	out := map[string][]byte{}
	var order []string
	for k, v := range doc {
		if k != "tables" {
			out[k] = canonical(v)
			continue
		}
		tables, _ := v.([]any)
		for _, x := range tables {
			tab, _ := x.(map[string]any)
			name, _ := tab["name"].(string)
			typ, _ := tab["table_type"].(string)
			if name == "" || typ == "" {
				t.Fatalf("bfrt.json: a table without a name or table_type: %v", tab["name"])
			}
			if !strings.HasPrefix(typ, "Snapshot") {
				order = append(order, name)
			}
			if typ == "SnapshotCfg" {
				delete(tab, "id")
				deps, _ := tab["depends_on"].([]any)
				slices.SortFunc(deps, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
			}
			out["table "+name] = canonical(tab)
		}
	}
	out["table order"] = canonical(order)
	return out
}

func writeGzip(t *testing.T, path string, b []byte) {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readGzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// TestBfrtDiffer: two compiles that list the snapshot's objects in the
// other order compare equal, and a change to any program object, or to
// their order, is seen.
func TestBfrtDiffer(t *testing.T) {
	orig := readGzip(t, filepath.Join("..", "stratum", "testdata", "tofino2.bfrt.json.gz"))
	edit := func(change func(tables []map[string]any)) []byte {
		var doc map[string]any
		if err := json.Unmarshal(orig, &doc); err != nil {
			t.Fatal(err)
		}
		var tables []map[string]any
		for _, x := range doc["tables"].([]any) {
			tables = append(tables, x.(map[string]any))
		}
		change(tables)
		doc["tables"] = tables
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	byName := func(tables []map[string]any, name string) int {
		i := slices.IndexFunc(tables, func(m map[string]any) bool { return m["name"] == name })
		if i < 0 {
			t.Fatalf("no %s in tofino2.bfrt.json", name)
		}
		return i
	}
	// As another run writes it: the ingress snapshot objects first, and
	// the SnapshotCfg named after them.
	otherRun := edit(func(tables []map[string]any) {
		first, second := byName(tables, "pipe.snapshot.egress_trigger"), byName(tables, "pipe.snapshot.ingress_trigger")
		if second != first+3 {
			t.Fatalf("snapshot objects at %d and %d: not the layout this test knows", first, second)
		}
		var gress [6]map[string]any
		copy(gress[:], tables[first:first+6])
		copy(tables[first:], gress[3:])
		copy(tables[first+3:], gress[:3])
		cfg := tables[byName(tables, "pipe.snapshot.cfg")]
		cfg["id"] = 0x91b7c3c5
		deps := cfg["depends_on"].([]any)
		slices.Reverse(deps)
	})
	if bytes.Equal(otherRun, orig) {
		t.Fatal("the edit changed nothing")
	}
	if d := bfrtDiffer(t, orig, otherRun); len(d) > 0 {
		t.Errorf("the snapshot objects in the other order differ: %v", d)
	}
	for _, c := range []struct {
		name   string
		change func([]map[string]any)
		want   string
	}{
		{"a program table's id", func(tables []map[string]any) {
			tables[byName(tables, "pipe.SwitchMLIngress.workers")]["id"] = 1
		}, "table pipe.SwitchMLIngress.workers"},
		{"the program's tables in another order", func(tables []map[string]any) {
			tables[0], tables[1] = tables[1], tables[0]
		}, "table order"},
		{"a snapshot data field", func(tables []map[string]any) {
			tables[byName(tables, "pipe.snapshot.ingress_data")]["size"] = 7
		}, "table pipe.snapshot.ingress_data"},
	} {
		if d := bfrtDiffer(t, orig, edit(c.change)); !slices.Equal(d, []string{c.want}) {
			t.Errorf("%s: differing objects %v, want [%s]", c.name, d, c.want)
		}
	}
}
