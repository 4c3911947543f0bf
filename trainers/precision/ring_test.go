package precision

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/switchml/switchml-go/quant"
)

// The chunks are Gloo's: 1 MiB segments, at least two per rank, a whole
// number per rank.
func TestGlooRingLayout(t *testing.T) {
	for _, tc := range []struct {
		elements, size, ranks int
		segElems, perRank     int
	}{
		{1 << 18, 2, 8, 1 << 14, 2},     // a 256 Ki-value bfloat16 bucket: 16 segments
		{4_500_000, 4, 8, 187_500, 3},   // 18 MB of float32: 18 segments, rounded up to 24
		{4_500_000, 2, 8, 281_250, 2},   // 9 MB of bfloat16: 9 segments, at least 16
		{1001, 2, 8, 63, 2},             // fewer bytes than segments need: 126-byte segments
		{23_440_896, 2, 8, 488_352, 6},  // BERT's word embeddings in bfloat16: 45 segments, rounded up to 48
		{23_440_896, 4, 2, 260_455, 45}, // the same in float32 over 2 ranks: 90 segments
	} {
		g := newGlooRing(tc.elements, tc.size, tc.ranks)
		if g.segElems != tc.segElems || g.perRank != tc.perRank {
			t.Errorf("%d values of %d bytes over %d ranks: %d values a segment, %d segments a rank; want %d and %d",
				tc.elements, tc.size, tc.ranks, g.segElems, g.perRank, tc.segElems, tc.perRank)
		}
		if last := g.owner(tc.elements - 1); last >= tc.ranks {
			t.Errorf("%d values over %d ranks: the last one belongs to rank %d", tc.elements, tc.ranks, last)
		}
	}
}

// Chunk c starts at rank c-1 and ends at rank c, rounding after every
// add: the order decides the bfloat16 sum.
func TestRingSumOrder(t *testing.T) {
	g := newGlooRing(6, 2, 3) // six one-value segments, two a rank: value j is in rank j/2's chunk
	tiny := float32(3.0 / 1024)
	// Value 0: x[2] + x[1] = 3/512, exact; + x[0] = 1 + 3/512 rounds up
	// to 1 + 1/128. Adding each tiny value to 1 in turn would round down
	// to 1 twice.
	if got := g.sumBF16([]float32{1, tiny, tiny}, 0); got != 1+1.0/128 {
		t.Errorf("value 0 (chunk of rank 0, from rank 2 down): %v, want %v", got, 1+1.0/128)
	}
	// Value 2 starts at rank 0: (1 + tiny) + tiny, 1 both times.
	if got := g.sumBF16([]float32{1, tiny, tiny}, 2); got != 1 {
		t.Errorf("value 2 (chunk of rank 1, from rank 0 down): %v, want 1", got)
	}
	if got := g.sumF32([]float32{1, tiny, tiny}, 0); got != 1+2*tiny {
		t.Errorf("float32: %v, want %v", got, 1+2*tiny)
	}
}

// torchPython is a Python with torch 2 (whose gloo sums bfloat16; Debian's
// torch 1.13 refuses it) and numpy: $SWITCHML_TORCH_VENV's, the one
// scripts/test.sh makes, or the system's.
func torchPython(t *testing.T) string {
	t.Helper()
	var cands []string
	if v := os.Getenv("SWITCHML_TORCH_VENV"); v != "" {
		cands = append(cands, filepath.Join(v, "bin", "python"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		cands = append(cands, filepath.Join(home, ".cache", "switchml", "torch-venv", "bin", "python"))
	}
	cands = append(cands, "/usr/bin/python3")
	for _, p := range cands {
		if exec.Command(p, "-c", "import torch.distributed, numpy; assert int(torch.__version__.split('.')[0]) >= 2").Run() == nil {
			return p
		}
	}
	t.Skip("skipped: needs PyTorch 2 with numpy (Debian's torch 1.13 has no bfloat16 in gloo): the venv scripts/test.sh makes, or SWITCHML_TORCH_VENV")
	return ""
}

// The model of the ring returns, bit for bit, what torch.distributed's
// gloo backend returns for bfloat16 and float32 tensors of 8 ranks, for a
// buffer of short segments and for a bucket of the trainer's size. (Its
// order matters: starting chunk c at rank c+1 and going up the ring fails
// here.)
func TestRingMatchesGloo(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: starts 8 PyTorch processes")
	}
	py := torchPython(t)
	const ranks = 8
	sizes := []int{1001, 1 << 18}
	total := 0
	for _, s := range sizes {
		total += s
	}
	// Magnitudes over 2^-20..2^4 and both signs, so that the order of the
	// adds shows in the bfloat16 sums.
	rng := rand.New(rand.NewPCG(7, 11))
	vals := make([][]float32, ranks)
	var in bytes.Buffer
	for r := range vals {
		vals[r] = make([]float32, total)
		for i := range vals[r] {
			vals[r][i] = float32(math.Ldexp(rng.NormFloat64(), rng.IntN(24)-20))
		}
		binary.Write(&in, binary.LittleEndian, vals[r])
	}
	dir := t.TempDir()
	inPath, outPath := filepath.Join(dir, "in.f32"), filepath.Join(dir, "out.bin")
	if err := os.WriteFile(inPath, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := []string{filepath.Join("testdata", "gloo_ring.py"), inPath, outPath, fmt.Sprint(ranks), fmt.Sprint(port)}
	for _, s := range sizes {
		args = append(args, fmt.Sprint(s))
	}
	cmd := exec.Command(py, args...)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", py, args, err, out)
	}
	out, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, ranks)
	off, pos := 0, 0
	for _, size := range sizes {
		bf, f32 := newGlooRing(size, 2, ranks), newGlooRing(size, 4, ranks)
		bad := 0
		for j := range size {
			for r := range ranks {
				x[r] = quant.BF16ToFloat32(quant.Float32ToBF16(vals[r][off+j]))
			}
			want := binary.LittleEndian.Uint16(out[pos+2*j:])
			if got := quant.Float32ToBF16(bf.sumBF16(x, j)); got != want && bad < 5 {
				bad++
				t.Errorf("%d values, bfloat16 value %d (rank %d's chunk): model %#04x, gloo %#04x", size, j, bf.owner(j), got, want)
			}
		}
		pos += 2 * size
		for j := range size {
			for r := range ranks {
				x[r] = vals[r][off+j]
			}
			want := math.Float32frombits(binary.LittleEndian.Uint32(out[pos+4*j:]))
			if got := f32.sumF32(x, j); got != want && bad < 10 {
				bad++
				t.Errorf("%d values, float32 value %d (rank %d's chunk): model %v, gloo %v", size, j, f32.owner(j), got, want)
			}
		}
		pos += 4 * size
		off += size
	}
	if pos != len(out) {
		t.Errorf("gloo wrote %d bytes, want %d", len(out), pos)
	}
}
