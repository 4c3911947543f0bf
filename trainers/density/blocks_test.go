package density

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// handLayout is two buckets in blocks of 4: bucket 0 is one embedding
// table of 10 values (blocks 0, 1, 2, the last of 2 values); bucket 1 is an
// embedding table of 5 values, a dense weight of 2 and another table of 5
// (block 4, values 4..7 of the bucket, mixes them, so it is not an
// embedding block; blocks 3 and 5 are).
func handLayout(t *testing.T) *Layout {
	t.Helper()
	l, err := NewLayout(4, [][]Var{
		{{Name: "emb/table", Size: 10}},
		{{Name: "emb/x", Size: 5}, {Name: "dense/w", Size: 2}, {Name: "emb/y", Size: 5}},
	}, UnitPrefix("emb"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLayoutBlocksStartAtEachBucket(t *testing.T) {
	l := handLayout(t)
	if want := []bool{true, true, true, true, false, true}; !slices.Equal(l.Embedding, want) {
		t.Fatalf("embedding blocks %v, want %v", l.Embedding, want)
	}
	if l.Elements != 22 || l.EmbeddingElements != 20 || !slices.Equal(l.Buckets, []int{10, 12}) {
		t.Fatalf("elements %d, embedding %d, buckets %v; want 22, 20, [10 12]", l.Elements, l.EmbeddingElements, l.Buckets)
	}
}

func TestDensityAndUnionOfTwoWorkers(t *testing.T) {
	l := handLayout(t)
	a := [][]float32{make([]float32, 10), make([]float32, 12)}
	b := [][]float32{make([]float32, 10), make([]float32, 12)}
	a[0][9] = 0.5                           // bucket 0's short last block: block 2
	a[1][0] = -1e-30                        // bucket 1's first value: block 3 (if the buckets were one buffer, block 2)
	a[1][6] = 2                             // the dense weight: block 4
	b[0][0] = 3                             // block 0
	b[1][5] = float32(math.Copysign(0, -1)) // -0 is zero: block 4 stays empty at b
	b[1][11] = float32(math.NaN())          // NaN must be sent: block 5

	ma := make([]bool, l.Blocks())
	if err := l.Mark(a, ma); err != nil {
		t.Fatal(err)
	}
	mb := make([]bool, l.Blocks())
	if err := l.Mark(b, mb); err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, false, true, true, true, false}; !slices.Equal(ma, want) {
		t.Fatalf("worker a's non-zero blocks %v, want %v", ma, want)
	}
	if want := []bool{true, false, false, false, false, true}; !slices.Equal(mb, want) {
		t.Fatalf("worker b's non-zero blocks %v, want %v", mb, want)
	}
	if got, want := l.Count(ma), (Share{All: 3.0 / 6, Embedding: 2.0 / 5, Rest: 1}); got != want {
		t.Errorf("worker a: %+v, want %+v", got, want)
	}
	if got, want := l.Count(mb), (Share{All: 2.0 / 6, Embedding: 2.0 / 5, Rest: 0}); got != want {
		t.Errorf("worker b: %+v, want %+v", got, want)
	}

	// The union: marking both workers into one mask.
	u := make([]bool, l.Blocks())
	for _, bufs := range [][][]float32{a, b} {
		if err := l.Mark(bufs, u); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := l.Count(u), (Share{All: 5.0 / 6, Embedding: 4.0 / 5, Rest: 1}); got != want {
		t.Errorf("union: %+v, want %+v", got, want)
	}
}

func TestDensityAtPacketSize(t *testing.T) {
	// 1000 values in blocks of 256: 256, 256, 256 and a short one of 232.
	l, err := NewLayout(256, [][]Var{{{Name: "w", Size: 1000}}}, UnitPrefix("emb"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]float32, 1000)
	buf[255] = 1 // last value of block 0
	buf[999] = 1 // last value of the short block 3
	m := make([]bool, l.Blocks())
	if err := l.Mark([][]float32{buf}, m); err != nil {
		t.Fatal(err)
	}
	if got := l.Count(m); got.All != 0.5 || !slices.Equal(m, []bool{true, false, false, true}) {
		t.Fatalf("blocks %v, density %v; want [true false false true], 0.5", m, got.All)
	}
}

func TestMarkRefusesAnotherShape(t *testing.T) {
	l := handLayout(t)
	m := make([]bool, l.Blocks())
	if err := l.Mark([][]float32{make([]float32, 10)}, m); err == nil {
		t.Error("one buffer for two buckets: no error")
	}
	if err := l.Mark([][]float32{make([]float32, 10), make([]float32, 11)}, m); err == nil {
		t.Error("bucket of 11 values where the layout has 12: no error")
	}
	if _, err := NewLayout(0, nil, UnitPrefix("x")); err == nil {
		t.Error("block size 0: no error")
	}
}

func TestPaper(t *testing.T) {
	// 90% embedding at density 10%, the rest dense: 0.9*0.1 + 0.1.
	if got := Paper(0.9, 0.1); math.Abs(got-0.19) > 1e-12 {
		t.Errorf("Paper(0.9, 0.1) = %v, want 0.19", got)
	}
	if got := Paper(0, 0.1); got != 1 {
		t.Errorf("no embedding: %v, want 1", got)
	}
}

func TestStat(t *testing.T) {
	var s Stat
	for _, v := range []float64{0.2, 0.1, 0.6} {
		s.add(v)
	}
	if s.Min != 0.1 || s.Max != 0.6 || math.Abs(s.Mean-0.3) > 1e-12 || s.N != 3 {
		t.Errorf("%+v, want mean 0.3, min 0.1, max 0.6, n 3", s)
	}
}

func TestRankFileIsRawLittleEndianFloat32(t *testing.T) {
	dir := t.TempDir()
	bufs := [][]float32{{1, -2.5}, {0, float32(math.Inf(1))}}
	if err := WriteRank(dir, 3, bufs); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "rank3.f32"))
	if err != nil {
		t.Fatal(err)
	}
	// 1.0 is 0x3f800000, written low byte first.
	if len(raw) != 16 || !slices.Equal(raw[:4], []byte{0, 0, 0x80, 0x3f}) {
		t.Fatalf("file starts % x (%d bytes), want 00 00 80 3f (16 bytes)", raw[:min(4, len(raw))], len(raw))
	}
	got, err := ReadRank(filepath.Join(dir, "rank3.f32"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{1, -2.5, 0, float32(math.Inf(1))}; !slices.Equal(got, want) {
		t.Fatalf("read back %v, want %v", got, want)
	}
}

func TestPapersTakeTheProfilesEmbeddingShare(t *testing.T) {
	dir := t.TempDir()
	// A profile of 1000 parameters, 900 of them in the unit "emb".
	prof := `{"model":"toy-paper","parameters":1000,"batch":4,"units":[{"name":"emb","parameters":900},{"name":"dense","parameters":100}]}`
	if err := os.WriteFile(filepath.Join(dir, "toy-paper.json"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := PaperProfiles
	PaperProfiles = []struct{ Profile, From string }{{"toy-paper", "toy"}}
	t.Cleanup(func() { PaperProfiles = saved })

	m := &ModelResult{Model: "toy", EmbeddingUnit: "emb", Blocks: map[string]*BlockStats{
		"256": {Worker: ShareStat{Embedding: Stat{Mean: 0.1}}, Union: map[string]*ShareStat{"8": {Embedding: Stat{Mean: 0.5}}}},
	}}
	rows, err := Papers(dir, []*ModelResult{m})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	r := rows[0]
	if r.EmbeddingParameters != 900 || r.EmbeddingShare != 0.9 {
		t.Errorf("embedding %d parameters, share %v; want 900, 0.9", r.EmbeddingParameters, r.EmbeddingShare)
	}
	// 0.9*0.1 + 0.1 and 0.9*0.5 + 0.1.
	if w, u := r.Worker["256"], r.Union["256"]["8"]; math.Abs(w-0.19) > 1e-12 || math.Abs(u-0.55) > 1e-12 {
		t.Errorf("per worker %v, union of 8 %v; want 0.19, 0.55", w, u)
	}

	m.EmbeddingUnit = "missing"
	if _, err := Papers(dir, []*ModelResult{m}); err == nil {
		t.Error("a profile without the embedding unit: no error")
	}
}
