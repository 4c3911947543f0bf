package quant

import (
	"math/rand/v2"
	"testing"
)

var benchSizes = []struct {
	name  string
	bytes int
}{
	{"256KiB", 256 << 10}, // a window of 256 packets of 1 KiB: what the cache holds
	{"1MiB", 1 << 20},
	{"64MiB", 64 << 20},
}

// benchData returns float32 gradients-like values and a payload buffer of the
// same byte size.
func benchData(bytes int) ([]float32, []byte) {
	rng := rand.New(rand.NewPCG(11, 12))
	x := make([]float32, bytes/4)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x, make([]byte, bytes)
}

// The exponent is fixed at 4 (values are normally distributed around 0; the
// per-block exponent scan is not part of the conversion being measured).
const benchN, benchE = 8, 4

// packetBytes is a packet's payload at the default packet size: the
// kernels' unit of work on the data path.
const packetBytes = 1024

// benchKernels runs bench once per vector kernel set this CPU has, so that
// AVX2 and AVX-512 are compared in one run.
func benchKernels(b *testing.B, bench func(b *testing.B)) {
	saved := useAVX512
	defer func() { useAVX512 = saved }()
	for _, k := range []struct {
		name string
		on   bool
	}{{"avx2", false}, {"avx512", true}} {
		if k.on && !saved {
			continue
		}
		useAVX512 = k.on
		b.Run(k.name, bench)
	}
}

// benchPackets times convert over a buffer of each size, one packet's
// payload at a time, with each vector kernel set: x holds the float32s,
// pkt their payload bytes.
func benchPackets(b *testing.B, convert func(x []float32, pkt []byte)) {
	benchKernels(b, func(b *testing.B) {
		for _, sz := range benchSizes {
			b.Run(sz.name, func(b *testing.B) {
				x, pkt := benchData(sz.bytes)
				QuantizeBE(pkt, x, benchN, benchE)
				b.SetBytes(int64(sz.bytes))
				b.ReportAllocs()
				for b.Loop() {
					for lo := 0; lo < sz.bytes; lo += packetBytes {
						convert(x[lo/4:(lo+packetBytes)/4], pkt[lo:lo+packetBytes])
					}
				}
			})
		}
	})
}

func BenchmarkQuantize(b *testing.B) {
	benchPackets(b, func(x []float32, pkt []byte) { QuantizeBE(pkt, x, benchN, benchE) })
}

func BenchmarkDequantize(b *testing.B) {
	benchPackets(b, func(x []float32, pkt []byte) { DequantizeBE(x, pkt, benchN, benchE) })
}

// BenchmarkCopy is the baseline: the same number of bytes moved by copy.
func BenchmarkCopy(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			src, dst := make([]byte, sz.bytes), make([]byte, sz.bytes)
			for i := range src {
				src[i] = byte(i)
			}
			b.SetBytes(int64(sz.bytes))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkHalf measures the float16 and bfloat16 paths on 1 MiB of float32
// equivalent (256 Ki elements), bytes counted as float32 like the others.
func BenchmarkHalf(b *testing.B) {
	const k = 1 << 18
	x, pkt := benchData(4 * k)
	h := make([]uint16, k)
	for i, v := range x {
		h[i] = Float32ToF16(v)
	}
	QuantizeF16BE(pkt, h, benchN, benchE)
	for _, bc := range []struct {
		name string
		fn   func()
	}{
		{"QuantizeF16", func() { QuantizeF16BE(pkt, h, benchN, benchE) }},
		{"DequantizeF16", func() { DequantizeF16BE(h, pkt, benchN, benchE) }},
		{"QuantizeBF16", func() { QuantizeBF16BE(pkt, h, benchN, benchE) }},
		{"DequantizeBF16", func() { DequantizeBF16BE(h, pkt, benchN, benchE) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(4 * k)
			b.ReportAllocs()
			for b.Loop() {
				bc.fn()
			}
		})
	}
}

// benchScan times fn over float32 inputs of each size.
func benchScan(b *testing.B, fn func(x []float32)) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			x, _ := benchData(sz.bytes)
			b.SetBytes(int64(sz.bytes))
			b.ReportAllocs()
			for b.Loop() {
				fn(x)
			}
		})
	}
}

func BenchmarkCheckFinite(b *testing.B) {
	benchScan(b, func(x []float32) {
		if err := CheckFinite(x); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkBlockExponent(b *testing.B) {
	benchScan(b, func(x []float32) {
		for lo := 0; lo < len(x); lo += 256 {
			BlockExponent(x[lo:min(lo+256, len(x))])
		}
	})
}

// BenchmarkWire16 is BenchmarkQuantize and BenchmarkDequantize on the 16-bit
// wire, per value (SetBytes counts the input's bytes): float32, bfloat16
// and float16.
func BenchmarkWire16(b *testing.B) {
	const k = 1 << 18
	x, pkt := benchData(4 * k)
	x = x[:k]
	h, h16 := make([]uint16, k), make([]uint16, k)
	for i, v := range x {
		h[i], h16[i] = Float32ToBF16(v), Float32ToF16(v)
	}
	QuantizePairsBE(pkt, x, benchN, benchE)
	for _, bc := range []struct {
		name  string
		bytes int
		fn    func()
	}{
		{"QuantizePairs", 4 * k, func() { QuantizePairsBE(pkt, x, benchN, benchE) }},
		{"DequantizePairs", 4 * k, func() { DequantizePairsBE(x, pkt, benchN, benchE) }},
		{"QuantizeBF16Pairs", 2 * k, func() { QuantizeBF16PairsBE(pkt, h, benchN, benchE) }},
		{"DequantizeBF16Pairs", 2 * k, func() { DequantizeBF16PairsBE(h, pkt, benchN, benchE) }},
		{"QuantizeF16Pairs", 2 * k, func() { QuantizeF16PairsBE(pkt, h16, benchN, benchE) }},
		{"DequantizeF16Pairs", 2 * k, func() { DequantizeF16PairsBE(h16, pkt, benchN, benchE) }},
		{"Quantize32", 4 * k, func() { QuantizeBE(pkt, x, benchN, benchE) }},
		{"QuantizeBF16", 2 * k, func() { QuantizeBF16BE(pkt, h, benchN, benchE) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(bc.bytes))
			b.ReportAllocs()
			for b.Loop() {
				bc.fn()
			}
		})
	}
}
