package quant

import (
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

func vectorMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	iters := 3000
	if testing.Short() {
		iters = 500
	}
	for iter := 0; iter < iters; iter++ {
		k := rng.IntN(100)
		off := rng.IntN(4)
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
