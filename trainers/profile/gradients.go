package profile

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/switchml/switchml-go/quant"
)

// Gradients is one recorded training step of a model: every rank's
// gradient in its own file, DIR/rank<r>.f32 (raw little-endian float32,
// the buckets the training harness hands to the allreduce one after the
// other, each from the last layer down), described by DIR/meta.json, as
// the density command's --dump writes them. A replay that uses them
// allreduces real gradients, with their zero blocks, instead of
// constants.
type Gradients struct {
	Dir      string
	Elements int
	// Buckets are the sizes of the recorded buckets, in file order.
	Buckets []int
	// Ranks is the number of rank files.
	Ranks int
}

// gradientsMeta is the part of meta.json a replay reads.
type gradientsMeta struct {
	Model    string `json:"model"`
	Elements int    `json:"elements"`
	Buckets  []int  `json:"buckets"`
	Ranks    int    `json:"ranks"`
}

// GradientsFile is rank's file in dir.
func GradientsFile(dir string, rank int) string {
	return filepath.Join(dir, fmt.Sprintf("rank%d.f32", rank))
}

// Errors a caller can tell apart.
var (
	// ErrGradientsMismatch is recorded gradients that a replay cannot use:
	// of another model or size, too few ranks, or buckets that do not fit.
	ErrGradientsMismatch = errors.New("recorded gradients do not fit the replay")
	// ErrWrongSum is an allreduce result that is not the sum of the ranks'
	// recorded gradients.
	ErrWrongSum = errors.New("wrong sum")
)

// OpenGradients checks that dir holds recorded gradients of p that a
// replay of workers ranks with buckets can use: a file per rank of p's
// gradient size, and recorded buckets that end wherever a replay bucket
// ends, so that each replay bucket holds whole recorded buckets (the
// same layers' values) and nothing else.
func OpenGradients(dir string, p *Profile, buckets []Bucket, workers int) (*Gradients, error) {
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil, fmt.Errorf("profile: recorded gradients: %w (want meta.json, as density --dump writes it)", err)
	}
	var m gradientsMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("profile: recorded gradients: %s: %w", filepath.Join(dir, "meta.json"), err)
	}
	switch {
	case m.Model != "" && m.Model != p.Model:
		return nil, fmt.Errorf("profile: %w: %s holds gradients of %s, the profile is %s's", ErrGradientsMismatch, dir, m.Model, p.Model)
	case int64(m.Elements) != p.Parameters:
		return nil, fmt.Errorf("profile: %w: %s holds gradients of %d values, the profile of %s has %d parameters", ErrGradientsMismatch, dir, m.Elements, p.Model, p.Parameters)
	case sum(m.Buckets) != m.Elements:
		return nil, fmt.Errorf("profile: %w: %s/meta.json: its buckets add up to %d values, not its %d elements", ErrGradientsMismatch, dir, sum(m.Buckets), m.Elements)
	case m.Ranks < workers:
		return nil, fmt.Errorf("profile: %w: %s holds the gradients of %d ranks, the replay has %d workers", ErrGradientsMismatch, dir, m.Ranks, workers)
	}
	for r := range workers {
		fi, err := os.Stat(GradientsFile(dir, r))
		if err != nil {
			return nil, fmt.Errorf("profile: recorded gradients: %w", err)
		}
		if fi.Size() != 4*int64(m.Elements) {
			return nil, fmt.Errorf("profile: %w: %s holds %d bytes, want %d (%d float32 values)", ErrGradientsMismatch, GradientsFile(dir, r), fi.Size(), 4*m.Elements, m.Elements)
		}
	}
	recorded := ends(m.Buckets)
	var replay []int
	for _, bk := range buckets {
		replay = append(replay, bk.Elems)
	}
	for _, e := range ends(replay) {
		if _, found := slices.BinarySearch(recorded, e); !found {
			return nil, fmt.Errorf("profile: %w: replay bucket end %d splits a recorded bucket (%s: replay ends %s, recorded %s): use a --bucket-mb whose buckets fit",
				ErrGradientsMismatch, e, p.Model, joinInts(ends(replay)), joinInts(recorded))
		}
	}
	return &Gradients{Dir: dir, Elements: m.Elements, Buckets: m.Buckets, Ranks: m.Ranks}, nil
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// ends are the offsets at which each of the consecutive sizes ends.
func ends(sizes []int) []int {
	var out []int
	e := 0
	for _, s := range sizes {
		e += s
		out = append(out, e)
	}
	return out
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// GradientReader reads one rank's recorded values.
type GradientReader struct {
	f       *os.File
	scratch []byte
}

// OpenGradientReader opens a recorded gradient file (GradientsFile).
func OpenGradientReader(path string) (*GradientReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("profile: recorded gradients: %w", err)
	}
	return &GradientReader{f: f}, nil
}

// Read fills dst with the values from offset off on.
func (g *GradientReader) Read(dst []float32, off int) error {
	const chunk = 1 << 16
	if g.scratch == nil {
		g.scratch = make([]byte, 4*chunk)
	}
	for done := 0; done < len(dst); done += chunk {
		d := dst[done:min(len(dst), done+chunk)]
		b := g.scratch[:4*len(d)]
		if _, err := g.f.ReadAt(b, 4*int64(off+done)); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("profile: reading values %d..%d of %s: %w", off+done, off+done+len(d), g.f.Name(), err)
		}
		for i := range d {
			d[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return nil
}

func (g *GradientReader) Close() error { return g.f.Close() }

// CheckSum verifies that got holds the sum over the first workers ranks
// of their recorded values from offset off on, within what the backends
// may lose: the bound of SwitchML's block-scaled fixed point with blocks
// of k values (quant.ErrorBound of the largest block exponent of the
// aligned blocks around each value, which cover the block it travelled
// in), plus the roundings of a float32 sum of workers terms (the ring,
// Gloo). A missing or doubled rank's contribution, or a NaN, fails it.
func (g *Gradients) CheckSum(got []float32, off, workers, k int) error {
	if off < 0 || off+len(got) > g.Elements {
		return fmt.Errorf("profile: values %d..%d are outside the %d recorded ones", off, off+len(got), g.Elements)
	}
	k = max(k, 1)
	readers := make([]*GradientReader, workers)
	for r := range readers {
		rd, err := OpenGradientReader(GradientsFile(g.Dir, r))
		if err != nil {
			return err
		}
		defer rd.Close()
		readers[r] = rd
	}
	// Chunks of whole blocks, each read with a block of margin on either
	// side for the neighbours' exponents.
	chunk := max(1, (1<<18)/k) * k
	vals := make([]float32, chunk+2*k)
	sums := make([]float64, chunk+2*k)
	maxAbs := make([]float32, chunk/k+2)
	exps := make([]int8, len(maxAbs))
	for a := 0; a < len(got); a += chunk {
		b := min(len(got), a+chunk)
		lo, hi := max(0, a-k), min(len(got), b+k)
		clear(sums[:hi-lo])
		clear(maxAbs)
		for _, rd := range readers {
			if err := rd.Read(vals[:hi-lo], off+lo); err != nil {
				return err
			}
			for i, v := range vals[:hi-lo] {
				sums[i] += float64(v)
				j := (lo+i)/k - (a/k - 1)
				maxAbs[j] = max(maxAbs[j], float32(math.Abs(float64(v))))
			}
		}
		for j, m := range maxAbs {
			exps[j] = quant.BlockExponent([]float32{m})
		}
		for i := a; i < b; i++ {
			j := i/k - (a/k - 1) // 1 <= j < len(exps)-1
			ex := max(exps[j-1], exps[j], exps[j+1])
			tol := quant.ErrorBound(workers, ex) + math.Ldexp(float64(workers*workers), int(ex)-24)
			want, v := sums[i-lo], float64(got[i])
			if math.IsNaN(v) || math.Abs(v-want) > tol {
				return fmt.Errorf("profile: value %d after the allreduce: %w: %g, the sum of the %d ranks' recorded values is %g (tolerance %.3g)", off+i, ErrWrongSum, v, workers, want, tol)
			}
		}
	}
	return nil
}
