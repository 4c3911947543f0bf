// Package precision compares, on recorded gradients (density --dump), the
// sum that SwitchML's 32-bit and 16-bit wires return with the exact sum,
// beside what a bfloat16 ring allreduce as Gloo runs it returns for the
// same tensors.
//
// Each worker's gradient is a file of float32 values, the buckets the
// trainer hands to the allreduce one after the other. For every bucket it
// computes the exact sum over the workers in float64, and the sum each
// method returns:
//
//   - the 32-bit wire: blocks of PacketElements values (a packet's), each
//     worker's block quantized with quant.QuantizeBE under the block's
//     exponent (the maximum over the workers, as the switch keeps it), the
//     32-bit words summed with wrap-around as the switch adds them, and
//     quant.DequantizeBE of the sum;
//   - the 16-bit wire on the float32 gradients: blocks of 2*PacketElements
//     values, quant.QuantizePairsBE and DequantizePairsBE;
//   - the 16-bit wire on the gradients rounded to bfloat16:
//     QuantizeBF16PairsBE, a bfloat16 result (DequantizeBF16PairsBE);
//   - a bfloat16 ring allreduce: the gradients rounded to bfloat16 and
//     summed in Gloo's ring order, rounded to bfloat16 after every add
//     (glooRing);
//   - the same ring on the float32 gradients, for scale.
//
// The blocks of a bucket start at its first value, as the library cuts a
// tensor into lanes of whole packets.
package precision

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/trainers/density"
	"github.com/switchml/switchml-go/trainers/profile"
	"github.com/switchml/switchml-go/wire"
)

// The methods compared, in the order tables show them.
const (
	Wire32     = "wire32"
	Wire16     = "wire16"
	Wire16BF16 = "wire16-bf16"
	RingBF16   = "ring-bf16"
	RingF32    = "ring-f32"
)

// Methods are the compared methods' identifiers, in table order.
var Methods = []string{Wire32, Wire16, Wire16BF16, RingBF16, RingF32}

// MethodNames describe the methods in a sentence's words.
var MethodNames = map[string]string{
	Wire32:     "SwitchML, 32-bit wire (float32)",
	Wire16:     "SwitchML, 16-bit wire (float32)",
	Wire16BF16: "SwitchML, 16-bit wire (bfloat16 in and out)",
	RingBF16:   "bfloat16 ring (Gloo's order)",
	RingF32:    "float32 ring (Gloo's order)",
}

// Errors is how far one method's sum r is from the exact sum T over a
// set of values.
type Errors struct {
	// RelL2 is ||r - T|| / ||T|| (Euclidean norms).
	RelL2 float64 `json:"rel_l2"`
	// RelMax is max|r - T| / max|T|, and MaxErr max|r - T|.
	RelMax float64 `json:"rel_max"`
	MaxErr float64 `json:"max_err"`
	// Zeroed is the share of the values with T != 0 for which r == 0
	// (ZeroedCount of them).
	Zeroed      float64 `json:"zeroed"`
	ZeroedCount int64   `json:"zeroed_count"`
}

// tally gathers one method's errors over values.
type tally struct {
	errSq, refSq, errMax, refMax float64
	nonZero, zeroed              int64
}

func (t *tally) add(r float32, ref float64) {
	d := float64(r) - ref
	t.errSq += d * d
	t.refSq += ref * ref
	t.errMax = max(t.errMax, math.Abs(d))
	t.refMax = max(t.refMax, math.Abs(ref))
	if ref != 0 {
		t.nonZero++
		if r == 0 {
			t.zeroed++
		}
	}
}

func (t *tally) merge(o *tally) {
	t.errSq += o.errSq
	t.refSq += o.refSq
	t.errMax = max(t.errMax, o.errMax)
	t.refMax = max(t.refMax, o.refMax)
	t.nonZero += o.nonZero
	t.zeroed += o.zeroed
}

func (t *tally) errors() Errors {
	e := Errors{MaxErr: t.errMax, ZeroedCount: t.zeroed}
	if t.refSq > 0 {
		e.RelL2 = math.Sqrt(t.errSq / t.refSq)
	}
	if t.refMax > 0 {
		e.RelMax = t.errMax / t.refMax
	}
	if t.nonZero > 0 {
		e.Zeroed = float64(t.zeroed) / float64(t.nonZero)
	}
	return e
}

// Bucket is one bucket's comparison.
type Bucket struct {
	Index  int `json:"index"`
	Offset int `json:"offset"`
	Values int `json:"values"`
	// NonZero counts the values whose exact sum is not 0.
	NonZero int64             `json:"non_zero"`
	Errors  map[string]Errors `json:"errors"`
}

// Result is one model's comparison: over all its values and per bucket.
type Result struct {
	Kind string `json:"kind"` // "model"
	// Name is the recording's directory name, Model the model's.
	Name           string `json:"name"`
	Model          string `json:"model"`
	Dir            string `json:"dir"`
	Workers        int    `json:"workers"`
	Elements       int    `json:"elements"`
	PacketElements int    `json:"packet_elements"`
	// Step, Warmup, Batch and Seed are the recording's (meta.json).
	Step    int               `json:"step"`
	Warmup  int               `json:"warmup"`
	Batch   int               `json:"batch"`
	Seed    int64             `json:"seed"`
	NonZero int64             `json:"non_zero"`
	Errors  map[string]Errors `json:"errors"`
	Buckets []Bucket          `json:"buckets"`
	Seconds float64           `json:"seconds"`
}

// Options configure Compare.
type Options struct {
	// Workers is how many of the recorded ranks to sum (0: all).
	Workers int
	// PacketElements is the values per packet at 32 bits (a packet carries
	// twice as many at 16 bits); 0 means 256, the library's default.
	PacketElements int
}

// chunkValues is how many values of a bucket are compared at a time: a
// whole number of 16-bit blocks at any packet size up to 2048.
const chunkValues = 1 << 17

// Compare compares the methods on the gradients recorded in dir.
func Compare(ctx context.Context, dir string, o Options) (*Result, error) {
	start := time.Now()
	meta, err := density.ReadMeta(dir)
	if err != nil {
		return nil, err
	}
	n := o.Workers
	if n == 0 {
		n = meta.Ranks
	}
	if n < 2 || n > meta.Ranks || n > quant.MaxWorkers16 {
		return nil, fmt.Errorf("precision: %d workers: want 2..%d, the ranks recorded in %s", n, min(meta.Ranks, quant.MaxWorkers16), dir)
	}
	k := o.PacketElements
	if k == 0 {
		k = 256
	}
	if k < 1 || chunkValues%(2*k) != 0 {
		return nil, fmt.Errorf("precision: %d values per packet: want a power of two up to %d", k, chunkValues/2)
	}
	readers := make([]*profile.GradientReader, n)
	for r := range readers {
		rd, err := profile.OpenGradientReader(profile.GradientsFile(dir, r))
		if err != nil {
			return nil, err
		}
		defer rd.Close()
		readers[r] = rd
	}
	res := &Result{Kind: "model", Name: filepath.Base(dir), Model: meta.Model, Dir: dir, Workers: n, Elements: meta.Elements, PacketElements: k,
		Step: meta.Step, Warmup: meta.Warmup, Batch: meta.Batch, Seed: meta.Seed, Errors: map[string]Errors{}}
	c := newComparer(n, k)
	total := make(map[string]*tally, len(Methods))
	for _, m := range Methods {
		total[m] = &tally{}
	}
	off := 0
	for i, size := range meta.Buckets {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		bt, err := c.bucket(readers, off, size)
		if err != nil {
			return nil, fmt.Errorf("precision: %s, bucket %d: %w", dir, i, err)
		}
		b := Bucket{Index: i, Offset: off, Values: size, NonZero: bt[Wire32].nonZero, Errors: map[string]Errors{}}
		for _, m := range Methods {
			b.Errors[m] = bt[m].errors()
			total[m].merge(bt[m])
		}
		res.Buckets = append(res.Buckets, b)
		off += size
	}
	for _, m := range Methods {
		res.Errors[m] = total[m].errors()
	}
	res.NonZero = total[Wire32].nonZero
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// comparer holds the buffers of one chunk of n workers' values.
type comparer struct {
	n, k  int
	vals  [][]float32 // per worker
	bf    [][]uint16  // per worker, rounded to bfloat16
	exact []float64
	out   []float32
	out16 []uint16
	words []int32 // the switch's registers
	buf   []byte
	x     []float32 // one value of every worker
}

func newComparer(n, k int) *comparer {
	c := &comparer{n: n, k: k, vals: make([][]float32, n), bf: make([][]uint16, n),
		exact: make([]float64, chunkValues), out: make([]float32, chunkValues), out16: make([]uint16, 2*k),
		words: make([]int32, k), buf: make([]byte, 4*k), x: make([]float32, n)}
	for r := range n {
		c.vals[r] = make([]float32, chunkValues)
		c.bf[r] = make([]uint16, chunkValues)
	}
	return c
}

// bucket compares the methods on the bucket of size values at offset off.
func (c *comparer) bucket(readers []*profile.GradientReader, off, size int) (map[string]*tally, error) {
	t := make(map[string]*tally, len(Methods))
	for _, m := range Methods {
		t[m] = &tally{}
	}
	ringBF := newGlooRing(size, 2, c.n)
	ringF := newGlooRing(size, 4, c.n)
	for a := 0; a < size; a += chunkValues {
		m := min(chunkValues, size-a)
		exact := c.exact[:m]
		clear(exact)
		for r, rd := range readers {
			v := c.vals[r][:m]
			if err := rd.Read(v, off+a); err != nil {
				return nil, err
			}
			if err := quant.CheckFinite(v); err != nil {
				return nil, fmt.Errorf("rank %d, values from %d: %w", r, off+a, err)
			}
			for i, x := range v {
				exact[i] += float64(x)
				c.bf[r][i] = quant.Float32ToBF16(x)
			}
		}
		c.wire(m, c.k, c.sum32)
		c.tally(t[Wire32], m)
		c.wire(m, 2*c.k, c.sum16)
		c.tally(t[Wire16], m)
		c.wire(m, 2*c.k, c.sum16BF16)
		c.tally(t[Wire16BF16], m)
		for i := range m {
			for r := range c.n {
				c.x[r] = quant.BF16ToFloat32(c.bf[r][i])
			}
			c.out[i] = ringBF.sumBF16(c.x, a+i)
		}
		c.tally(t[RingBF16], m)
		for i := range m {
			for r := range c.n {
				c.x[r] = c.vals[r][i]
			}
			c.out[i] = ringF.sumF32(c.x, a+i)
		}
		c.tally(t[RingF32], m)
	}
	return t, nil
}

// wire runs sum over the chunk's first m values in blocks of block
// values, each writing its block of c.out.
func (c *comparer) wire(m, block int, sum func(lo, hi int)) {
	for lo := 0; lo < m; lo += block {
		sum(lo, min(m, lo+block))
	}
}

func (c *comparer) tally(t *tally, m int) {
	for i, ref := range c.exact[:m] {
		t.add(c.out[i], ref)
	}
}

// sum32 is the 32-bit wire's sum of values lo..hi-1.
func (c *comparer) sum32(lo, hi int) {
	c.switchSum(hi-lo,
		func(r int) int8 { return quant.BlockExponent(c.vals[r][lo:hi]) },
		func(b []byte, r int, e int8) { quant.QuantizeBE(b, c.vals[r][lo:hi], c.n, e) },
		func(b []byte, e int8) { quant.DequantizeBE(c.out[lo:hi], b, c.n, e) })
}

// sum16 is the 16-bit wire's sum of the float32 values lo..hi-1.
func (c *comparer) sum16(lo, hi int) {
	c.switchSum(quant.PairWords(hi-lo),
		func(r int) int8 { return quant.BlockExponent(c.vals[r][lo:hi]) },
		func(b []byte, r int, e int8) { quant.QuantizePairsBE(b, c.vals[r][lo:hi], c.n, e) },
		func(b []byte, e int8) { quant.DequantizePairsBE(c.out[lo:hi], b, c.n, e) })
}

// sum16BF16 is the 16-bit wire's sum of the bfloat16 values lo..hi-1,
// a bfloat16 result.
func (c *comparer) sum16BF16(lo, hi int) {
	c.switchSum(quant.PairWords(hi-lo),
		func(r int) int8 { return quant.BlockExponentBF16(c.bf[r][lo:hi]) },
		func(b []byte, r int, e int8) { quant.QuantizeBF16PairsBE(b, c.bf[r][lo:hi], c.n, e) },
		func(b []byte, e int8) {
			out := c.out16[:hi-lo]
			quant.DequantizeBF16PairsBE(out, b, c.n, e)
			for i, h := range out {
				c.out[lo+i] = quant.BF16ToFloat32(h)
			}
		})
}

// switchSum is one block's trip through the switch: every worker's
// exponent exp(r), their maximum e (the switch keeps it), every worker's
// block as nw words under e (q writes them), the words added with
// wrap-around as the switch's 32-bit adders do, and dq reading the sum.
func (c *comparer) switchSum(nw int, exp func(r int) int8, q func(b []byte, r int, e int8), dq func(b []byte, e int8)) {
	e := quant.MinExponent
	for r := range c.n {
		e = quant.MaxExponent(e, exp(r))
	}
	b, words := c.buf[:4*nw], c.words[:nw]
	clear(words)
	for r := range c.n {
		q(b, r, e)
		wire.AddPayload(words, b)
	}
	wire.PutPayload(b, words)
	dq(b, e)
}
