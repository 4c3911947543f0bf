package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/switchml/switchml-go/wire"
)

// withGeneric runs f with the vector kernels switched off.
func withGeneric(f func()) {
	saved := useAVX2
	useAVX2 = false
	defer func() { useAVX2 = saved }()
	f()
}

// TestVectorMatchesGeneric: the vector kernels (where the CPU has them) produce
// exactly the bits of the generic loops, for every magnitude class, clamped
// inputs and ±Inf included, at every length and alignment.
func TestVectorMatchesGeneric(t *testing.T) {
	if !useAVX2 {
		t.Skip("no vector kernels on this CPU or build")
	}
	// AVX-512 where the CPU has it, with AVX2 for the rest of 8; AVX2
	// alone, as on CPUs without AVX-512.
	for _, wide := range []bool{true, false} {
		name := map[bool]string{true: "avx512", false: "avx2"}[wide]
		t.Run(name, func(t *testing.T) {
			if wide && !useAVX512 {
				t.Skip("no AVX-512 on this CPU")
			}
			saved := useAVX512
			useAVX512 = wide
			defer func() { useAVX512 = saved }()
			vectorMatchesGeneric(t)
		})
	}
}

// kernelInput is k values of one magnitude class, with some ±Inf and -0,
// starting off elements into their allocation (so at every alignment).
func kernelInput(rng *rand.Rand, k, off int) []float32 {
	src := make([]float32, k+off)[off:]
	class := classes[rng.IntN(len(classes))]
	for i := range src {
		src[i] = class.gen(rng)
		switch rng.IntN(50) {
		case 0:
			src[i] = float32(math.Inf(1 - 2*rng.IntN(2)))
		case 1:
			src[i] = float32(math.Copysign(0, -1))
		}
	}
	return src
}

// halfInput is src rounded to a 16-bit type, with a twentieth of the
// values any bits instead (NaN included), off elements into its
// allocation as src is.
func halfInput(rng *rand.Rand, src []float32, off int, round func(float32) uint16) []uint16 {
	h := make([]uint16, len(src)+off)[off:]
	for i, f := range src {
		h[i] = round(f)
		if rng.IntN(20) == 0 {
			h[i] = uint16(rng.Uint32())
		}
	}
	return h
}

// infForNaN makes every NaN of h the infinity of its sign; inf is the
// type's +Inf bits (its exponent all ones).
func infForNaN(h []uint16, inf uint16) {
	for i, b := range h {
		if b&0x7fff > inf {
			h[i] = inf | b&0x8000
		}
	}
}

func vectorMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	iters := 3000
	if testing.Short() {
		iters = 500
	}
	for iter := 0; iter < iters; iter++ {
		k, off := rng.IntN(100), rng.IntN(4)
		src := kernelInput(rng, k, off)
		n := 1 + rng.IntN(300)
		e := BlockExponent(src)
		fe, fin := FiniteBlockExponent(src)
		var eG, feG int8
		var finG bool
		withGeneric(func() {
			eG = BlockExponent(src)
			feG, finG = FiniteBlockExponent(src)
		})
		if e != eG || fe != feG || fin != finG {
			t.Fatalf("block exponent of %d elements: vector %d (%d, %v), generic %d (%d, %v)", k, e, fe, fin, eG, feG, finG)
		}
		if rng.IntN(5) == 0 {
			e = int8(rng.IntN(254) - 126) // often below the data: clamping
		}
		pktV, pktG := make([]byte, 4*k+off)[off:], make([]byte, 4*k+off)[off:]
		qV, qG := make([]int32, k), make([]int32, k)
		QuantizeBE(pktV, src, n, e)
		Quantize(qV, src, n, e)
		withGeneric(func() {
			QuantizeBE(pktG, src, n, e)
			Quantize(qG, src, n, e)
		})
		if string(pktV) != string(pktG) {
			t.Fatalf("QuantizeBE: vector and generic differ (k=%d n=%d e=%d)", k, n, e)
		}
		for i := range qV {
			if qV[i] != qG[i] {
				t.Fatalf("Quantize[%d] of %g: vector %d, generic %d (n=%d e=%d)", i, src[i], qV[i], qG[i], n, e)
			}
		}
		// Dequantize any int32 bits with any exponent code.
		for i := range pktV {
			pktV[i] = byte(rng.Uint32())
		}
		ints := make([]int32, k)
		wire.ReadPayload(ints, pktV)
		if k > 0 {
			ints[0] = math.MinInt32
		}
		wire.PutPayload(pktV, ints)
		e = int8(rng.IntN(256) - 128)
		outV, outG := make([]float32, k), make([]float32, k)
		nV, nG := make([]float32, k), make([]float32, k)
		DequantizeBE(outV, pktV, n, e)
		Dequantize(nV, ints, n, e)
		withGeneric(func() {
			DequantizeBE(outG, pktV, n, e)
			Dequantize(nG, ints, n, e)
		})
		for i := range outV {
			if math.Float32bits(outV[i]) != math.Float32bits(outG[i]) || math.Float32bits(nV[i]) != math.Float32bits(nG[i]) {
				t.Fatalf("Dequantize[%d] of %d: vector %v/%v, generic %v/%v (n=%d e=%d)", i, ints[i], outV[i], nV[i], outG[i], nG[i], n, e)
			}
		}
	}
}

// TestPairKernelsMatchGeneric: the 16-bit wire's vector kernels produce
// exactly the bytes and bits of the generic loops, float32, bfloat16 and
// float16,
// for every magnitude class (±Inf and clamping included; a NaN's words
// are unspecified, as Quantize says), any summed words and any exponent
// code, at every length and alignment; the magnitude scan on any bits.
func TestPairKernelsMatchGeneric(t *testing.T) {
	if !useAVX2 {
		t.Skip("no vector kernels on this CPU or build")
	}
	rng := rand.New(rand.NewPCG(13, 16))
	iters := 3000
	if testing.Short() {
		iters = 500
	}
	for iter := 0; iter < iters; iter++ {
		k, off := rng.IntN(200), rng.IntN(4)
		src := kernelInput(rng, k, off)
		h, h16 := halfInput(rng, src, off, Float32ToBF16), halfInput(rng, src, off, Float32ToF16)
		if rng.IntN(4) == 0 && k > 0 {
			h[rng.IntN(k)] |= 0x7f80 // a NaN or Inf somewhere: the scan sees it
		}
		n := 1 + rng.IntN(MaxWorkers16)
		e := BlockExponent(src)
		if rng.IntN(5) == 0 {
			e = int8(rng.IntN(254) - 126) // often below the data: clamping
		}
		var mG uint16
		withGeneric(func() { mG = maxMagnitude16(h) })
		if m := maxMagnitude16(h); m != mG {
			t.Fatalf("maxMagnitude16 of %d values: vector %#04x, generic %#04x", k, m, mG)
		}
		// No NaN to quantize: ±Inf instead.
		infForNaN(h, 0x7f80)
		infForNaN(h16, 0x7c00)
		words := 4*PairWords(k) + off
		for _, c := range []struct {
			name     string
			quantize func(dst []byte) int
		}{
			{"QuantizePairsBE", func(dst []byte) int { return QuantizePairsBE(dst, src, n, e) }},
			{"QuantizeBF16PairsBE", func(dst []byte) int { return QuantizeBF16PairsBE(dst, h, n, e) }},
			{"QuantizeF16PairsBE", func(dst []byte) int { return QuantizeF16PairsBE(dst, h16, n, e) }},
		} {
			v, g := make([]byte, words)[off:], make([]byte, words)[off:]
			c.quantize(v)
			withGeneric(func() { c.quantize(g) })
			if string(v) != string(g) {
				t.Fatalf("%s: vector and generic differ (k=%d n=%d e=%d)\n% x\n% x", c.name, k, n, e, v, g)
			}
		}
		// Any summed words, with any exponent code.
		pV := make([]byte, words)[off:]
		for i := range pV {
			pV[i] = byte(rng.Uint32())
		}
		e = int8(rng.IntN(256) - 128)
		fV, fG := make([]float32, k), make([]float32, k)
		hV, hG := make([]uint16, k), make([]uint16, k)
		jV, jG := make([]uint16, k), make([]uint16, k)
		DequantizePairsBE(fV, pV, n, e)
		DequantizeBF16PairsBE(hV, pV, n, e)
		DequantizeF16PairsBE(jV, pV, n, e)
		withGeneric(func() {
			DequantizePairsBE(fG, pV, n, e)
			DequantizeBF16PairsBE(hG, pV, n, e)
			DequantizeF16PairsBE(jG, pV, n, e)
		})
		for i := range fV {
			if math.Float32bits(fV[i]) != math.Float32bits(fG[i]) || hV[i] != hG[i] || jV[i] != jG[i] {
				t.Fatalf("value %d of %d from % x: vector %v/%#04x/%#04x, generic %v/%#04x/%#04x (n=%d e=%d)", i, k, pV[4*(i/2):4*(i/2)+4], fV[i], hV[i], jV[i], fG[i], hG[i], jG[i], n, e)
			}
		}
	}
}

// TestDequantizeHalfPairsTies: the half-type kernels round float32 sums
// that sit exactly halfway between two bfloat16 or float16 values to the
// even one, as Float32ToBF16 and Float32ToF16 do. A wire scale is never a
// power of two, so its sums are seldom ties; this test gives the kernels
// one (2^-5), under which every sum of 9 (bfloat16) or 12 (float16)
// significant bits ending in 1 is a tie, of either parity.
func TestDequantizeHalfPairsTies(t *testing.T) {
	if !useAVX2 {
		t.Skip("no vector kernels on this CPU or build")
	}
	rng := rand.New(rand.NewPCG(17, 16))
	const k, g = 1 << 16, 0x1p-5
	src := make([]byte, 2*k)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for _, tc := range []struct {
		name   string
		bf16   bool
		round  func(float32) uint16
		kept   uint // the float32 mantissa bits the type drops
		needed bool
	}{
		{"bfloat16", true, Float32ToBF16, 16, true},
		{"float16", false, Float32ToF16, 13, useF16C},
	} {
		h := make([]uint16, k)
		if got := dequantizeHalfPairsFast(h, src, g, tc.bf16); got != k {
			if !tc.needed && got == 0 {
				t.Logf("%s: no kernel on this CPU (no F16C)", tc.name)
				continue
			}
			t.Fatalf("%s: the kernel took %d of %d values", tc.name, got, k)
		}
		var ties [2]int
		for i := range h {
			a, b := unpair(binary.BigEndian.Uint32(src[4*(i/2):]))
			x := float32(float64([2]int32{a, b}[i%2]) * g)
			if bits := math.Float32bits(x); bits&(1<<tc.kept-1) == 1<<(tc.kept-1) {
				ties[bits>>tc.kept&1]++
			}
			if h[i] != tc.round(x) {
				t.Fatalf("%s: sum %d = %v: kernel %#04x, rounded %#04x", tc.name, i, x, h[i], tc.round(x))
			}
		}
		if ties[0] == 0 || ties[1] == 0 {
			t.Fatalf("%s: ties with an even and an odd last bit: %d and %d; the test needs both", tc.name, ties[0], ties[1])
		}
	}
}
