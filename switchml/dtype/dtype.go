// Package dtype holds the element types an allreduce sums, one Codec each,
// in one registry. A codec says how its values travel (quantized into the
// int32 payload of a packet and back), how they are checked, how the ring
// fallback sums them, and how the CLI makes and checks test data; the
// worker's engine, the session, the ring fallback, the C library, the
// PyTorch backend and the CLI look a type up here instead of switching on
// it.
//
// A tensor travels as its bytes (Bytes of a typed slice), Codec.Size bytes
// per value, in the machine's byte order. Adding a type is one file in
// this package: a Codec and its Register call in an init function.
package dtype

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/switchml/switchml-go/quant"
)

// Codec is one element type.
type Codec interface {
	// Name is the type's name ("float32"): the CLI's --dtype, the C
	// library's switchml_dtype_lookup and the PyTorch backend use it, and it is
	// PyTorch's name for the type where it has one.
	Name() string
	// Code is the type's number in the C interface (switchml_dtype in
	// capi/switchml.h); a code never changes meaning.
	Code() int
	// Size is the width of one value in bytes.
	Size() int
	// Scaled says the values travel as block-scaled fixed point (package
	// quant): every block's exponent is exchanged one window ahead of its
	// data, and sums are approximate within Bound. Otherwise the values
	// travel as int32 and the switch's int32 sums are exact (wrapping).
	Scaled() bool
	// Check returns an error wrapping *quant.NonFiniteError for the first
	// NaN or Inf in data, nil if there is none (always, for unscaled types).
	Check(data []byte) error
	// Exponent is the exponent of a block of values (quant.BlockExponent);
	// with check it also says whether the block is finite (false: Check
	// names the bad value). Called for scaled types only.
	Exponent(block []byte, check bool) (exp int8, finite bool)
	// Quantize writes the block's values into dst as big-endian int32
	// (4 bytes a value), scaled for a sum of workers values under exp.
	Quantize(dst, block []byte, workers int, exp int8)
	// Dequantize writes the summed payload back into the block's values.
	Dequantize(block, payload []byte, workers int, exp int8)
	// RingSum sums data across the ranks over the ring fallback, through
	// one of r's sums; scratch is a buffer the codec may grow and keep
	// for the next call.
	RingSum(ctx context.Context, r Summer, data []byte, scratch *[]float32) error
	// Get and Set read and write value i, as float64 (test data and
	// checks).
	Get(data []byte, i int) float64
	Set(data []byte, i int, v float64)
	// Bound is the largest error of a sum of workers values whose block
	// has exponent exp, rounding to the type included; 0 for exact types.
	Bound(workers int, exp int8) float64
}

// Summer is what the ring fallback offers a codec: an exact int32 sum and
// a float32 sum, across the ranks, in place.
type Summer interface {
	AllReduceFloat32(ctx context.Context, x []float32) error
	AllReduceInt32(ctx context.Context, x []int32) error
}

var (
	mu     sync.RWMutex
	byName = map[string]Codec{}
	byCode = map[int]Codec{}
)

// Register adds a codec to the registry; call it from an init function.
// Codecs are compared (==), so c must be of a comparable type: a pointer,
// or a struct without func, slice or map fields.
// It panics if the name or the code is taken: that is a programming error.
func Register(c Codec) {
	mu.Lock()
	defer mu.Unlock()
	if old, ok := byName[c.Name()]; ok {
		panic(fmt.Sprintf("dtype: %q registered twice (code %d and %d)", c.Name(), old.Code(), c.Code()))
	}
	if old, ok := byCode[c.Code()]; ok {
		panic(fmt.Sprintf("dtype: code %d registered for %q and %q", c.Code(), old.Name(), c.Name()))
	}
	byName[c.Name()] = c
	byCode[c.Code()] = c
}

// ErrUnknown is a name or code that no registered codec has.
var ErrUnknown = errors.New("unknown dtype")

// ByName returns the codec of a name, or an error listing the known ones.
func ByName(name string) (Codec, error) {
	mu.RLock()
	c, ok := byName[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q: want one of %s", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	return c, nil
}

// ByCode returns the codec of a C interface code, or an error listing the
// known ones.
func ByCode(code int) (Codec, error) {
	mu.RLock()
	c, ok := byCode[code]
	mu.RUnlock()
	if !ok {
		var known []string
		for _, c := range All() {
			known = append(known, fmt.Sprintf("%s (%d)", c.Name(), c.Code()))
		}
		return nil, fmt.Errorf("%w %d: want one of %s", ErrUnknown, code, strings.Join(known, ", "))
	}
	return c, nil
}

// All returns the registered codecs in the order of their codes.
func All() []Codec {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]Codec, 0, len(byCode))
	for _, c := range byCode {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Codec) int { return a.Code() - b.Code() })
	return out
}

// Names returns the registered names in the order of their codes.
func Names() []string {
	var names []string
	for _, c := range All() {
		names = append(names, c.Name())
	}
	return names
}

// Bytes is x's memory as bytes, without a copy: writes through either
// slice show in the other.
func Bytes[T any](x []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*int(unsafe.Sizeof(z)))
}

// As is b's memory as values of T, without a copy; b must be aligned for
// T (as memory from Bytes or New is). A partial value at the end is left
// out.
func As[T any](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

// New allocates n zero values of c's type, as bytes aligned for it.
func New(c Codec, n int) []byte {
	return Bytes(make([]uint64, (n*c.Size()+7)/8))[:n*c.Size()]
}

// BlockExponents writes the exponent of every k-value block of data into
// exps (len(exps) >= the number of blocks) and checks the values are
// finite, like quant.BlockExponents: an error wraps the first bad value's
// *quant.NonFiniteError.
func BlockExponents(c Codec, exps []int8, data []byte, k int) error {
	if f, ok := c.(interface {
		BlockExponents(exps []int8, data []byte, k int) error
	}); ok {
		return f.BlockExponents(exps, data, k)
	}
	size := c.Size()
	n := len(data) / size
	for b := 0; b*k < n; b++ {
		blk := data[b*k*size : min(b*k+k, n)*size]
		e, finite := c.Exponent(blk, true)
		if !finite {
			err := c.Check(blk)
			if nf, ok := err.(*quant.NonFiniteError); ok {
				nf.Index += b * k
			}
			return err
		}
		exps[b] = e
	}
	return nil
}
