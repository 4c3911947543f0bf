package profile

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/trainers/collective"
)

// recordedGradient is rank's made-up gradient of n values: zero blocks of
// 16 values here and there, as in an embedding's, and values of several
// magnitudes.
func recordedGradient(rank, n int) []float32 {
	g := make([]float32, n)
	for i := range g {
		if (i/16+rank)%3 == 0 {
			continue
		}
		g[i] = float32(math.Sin(float64(7*i+rank+1))) * float32(math.Ldexp(1, (i+rank)%9-4))
	}
	return g
}

// writeGradients writes the gradients as the density command dumps them.
func writeGradients(t *testing.T, dir, model string, grads [][]float32, buckets []int) {
	t.Helper()
	for r, g := range grads {
		b := make([]byte, 4*len(g))
		for i, v := range g {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		if err := os.WriteFile(GradientsFile(dir, r), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meta, err := json.Marshal(map[string]any{"model": model, "elements": len(grads[0]), "buckets": buckets, "ranks": len(grads),
		"format": "raw little-endian float32, the buckets one after the other"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), meta, 0o644); err != nil {
		t.Fatal(err)
	}
}

// capture is a one-worker backend that keeps a copy of every buffer it
// is handed.
type capture struct {
	mu   sync.Mutex
	bufs [][]float32
}

func (c *capture) AllReduceFloat32(ctx context.Context, buf []float32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bufs = append(c.bufs, slices.Clone(buf))
	return nil
}

func (c *capture) Close() error { return nil }

// The buckets, in pieces too, hand the backend the recorded values in
// file order, and Check compares with the sum of the ranks' files.
func TestReplayFillsRecordedGradients(t *testing.T) {
	dir := t.TempDir()
	p := testProfile()
	g0 := recordedGradient(0, 1000)
	writeGradients(t, dir, p.Model, [][]float32{g0}, []int{100, 300, 200, 400})
	c := &capture{}
	// Buckets of 350: c+b (400 values), a (600) through a 250-value buffer.
	rp := NewReplayer(p, 350, c, 0, 1, 250)
	g, err := OpenGradients(dir, p, rp.Buckets, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := rp.UseGradients(g); err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	if _, err := rp.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []float32
	for _, b := range c.bufs {
		got = append(got, b...)
	}
	if !slices.Equal(got, g0) {
		t.Fatalf("the backend got %d values that differ from the recorded ones (%d)", len(got), len(g0))
	}
	if err := rp.Check(); err != nil {
		t.Fatalf("a one-worker replay fails its check: %v", err)
	}
	// As if a second rank's contribution were missing from the sums.
	rp.Workers = 2
	writeGradients(t, dir, p.Model, [][]float32{g0, recordedGradient(1, 1000)}, []int{100, 300, 200, 400})
	if err := rp.Check(); !errors.Is(err, ErrWrongSum) || !strings.Contains(err.Error(), "sum of the 2 ranks' recorded values") {
		t.Fatalf("Check of sums missing a rank: %v, want a mismatch", err)
	}
}

// Three ranks replay recorded gradients over the exact backend: every
// value of the last pieces checks against the sum of the three files.
func TestReplayRecordedGradientsOverStar(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 3
	star := collective.ServeStar(ctx, ln, n)
	defer star.Close()
	p := testProfile()
	dir := t.TempDir()
	var grads [][]float32
	for r := range n {
		grads = append(grads, recordedGradient(r, 1000))
	}
	writeGradients(t, dir, p.Model, grads, []int{400, 600})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			be, err := collective.DialStar(ctx, star.Addr(), r, n)
			if err != nil {
				errs[r] = err
				return
			}
			defer be.Close()
			rp := NewReplayer(p, 350, be, r, n, 250)
			g, err := OpenGradients(dir, p, rp.Buckets, n)
			if err != nil {
				errs[r] = err
				return
			}
			if errs[r] = rp.UseGradients(g); errs[r] != nil {
				return
			}
			defer rp.Close()
			if _, errs[r] = rp.Step(ctx); errs[r] != nil {
				return
			}
			errs[r] = rp.Check()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// CheckSum takes a float32 sum of the ranks' values, and refuses a value
// off by a small contribution, and a NaN.
func TestCheckSum(t *testing.T) {
	dir := t.TempDir()
	const n, size, k = 4, 3000, 256
	var grads [][]float32
	for r := range n {
		grads = append(grads, recordedGradient(r, size))
	}
	writeGradients(t, dir, "t", grads, []int{size})
	g := &Gradients{Dir: dir, Elements: size, Buckets: []int{size}, Ranks: n}
	sum := make([]float32, size)
	for _, gr := range grads {
		for i, v := range gr {
			sum[i] += v
		}
	}
	if err := g.CheckSum(sum[1000:2700], 1000, n, k); err != nil {
		t.Fatalf("float32 sums: %v", err)
	}
	bad := slices.Clone(sum)
	bad[1500] -= grads[2][1500] // rank 2's value there is about 2^-4 or more, or zero
	if grads[2][1500] == 0 {
		t.Fatal("the test wants rank 2 to hold a value at 1500")
	}
	if err := g.CheckSum(bad[1000:2700], 1000, n, k); !errors.Is(err, ErrWrongSum) || !strings.Contains(err.Error(), "value 1500 ") {
		t.Errorf("a value missing rank 2's contribution: %v, want a mismatch at value 1500", err)
	}
	bad = slices.Clone(sum)
	bad[2999] = float32(math.NaN())
	if err := g.CheckSum(bad[2000:], 2000, n, k); !errors.Is(err, ErrWrongSum) || !strings.Contains(err.Error(), "value 2999 ") {
		t.Errorf("a NaN: %v, want a mismatch at value 2999", err)
	}
	if err := g.CheckSum(sum[2000:], 2001, n, k); err == nil {
		t.Error("values past the recorded ones: no error")
	}
}

// OpenGradients refuses files that do not fit the profile or the replay's
// buckets, and says what does not fit.
func TestOpenGradientsRefusesMismatches(t *testing.T) {
	p := testProfile()
	buckets := p.Buckets(350) // ends at 400 and 1000
	two := [][]float32{recordedGradient(0, 1000), recordedGradient(1, 1000)}
	for _, tc := range []struct {
		name    string
		grads   [][]float32
		buckets []int
		model   string
		workers int
		want    string
	}{
		{"a recorded bucket across a replay bucket's end", two, []int{500, 500}, "t", 2, "replay bucket end 400 splits a recorded bucket"},
		{"another model's size", [][]float32{recordedGradient(0, 900), recordedGradient(1, 900)}, []int{900}, "t", 2, "gradients of 900 values"},
		{"another model", two, []int{400, 600}, "u", 2, "gradients of u"},
		{"fewer ranks than workers", two, []int{400, 600}, "t", 3, "2 ranks, the replay has 3 workers"},
		{"buckets not adding up", two, []int{400, 500}, "t", 2, "add up to 900"},
	} {
		dir := t.TempDir()
		writeGradients(t, dir, tc.model, tc.grads, tc.buckets)
		if _, err := OpenGradients(dir, p, buckets, tc.workers); !errors.Is(err, ErrGradientsMismatch) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	// A rank file cut short.
	dir := t.TempDir()
	writeGradients(t, dir, "t", two, []int{400, 600})
	if err := os.Truncate(GradientsFile(dir, 1), 3000); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenGradients(dir, p, buckets, 2); !errors.Is(err, ErrGradientsMismatch) || !strings.Contains(err.Error(), "holds 3000 bytes, want 4000") {
		t.Errorf("a short rank file: %v", err)
	}
	if _, err := OpenGradients(t.TempDir(), p, buckets, 2); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "meta.json") {
		t.Errorf("no meta.json: %v", err)
	}
}
