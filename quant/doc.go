// Package quant converts float32, float16 and bfloat16 blocks to the block-scaled
// fixed-point int32 representation that SwitchML aggregates in the network, and
// converts the switch's int32 sums back.
//
// # Exponents
//
// Every block of k elements (one packet's payload) gets a local exponent
//
//	e = exponent(max|x|) + 1 = (IEEE-754 exponent field of max|x|) - 126
//
// so that 2^e > max|x|. A block of zeros and denormals has e = MinExponent = -126
// (2^-126 is above every float32 denormal). Workers combine exponents with
// MaxExponent (the switch does the same); the result E bounds every worker's block.
//
// The wire carries exponents as int8, which holds -128..127, but the float32 range
// needs -126..128 (values in [2^127, 2^128) have e = 128). The code 127 therefore
// stands for 2^128: BlockExponent returns 127 for every block with max|x| >= 2^126,
// and Scale, Dequantize and ErrorBound read 127 as 2^128. Only those blocks
// (magnitudes above 8.5e37) lose one bit; every finite float32 is representable.
// Codes below -126 never come out of BlockExponent; they are accepted and mean 2^e.
//
// # Scale and conversion
//
// With n workers and combined exponent E, the scale is
//
//	f = (2^31 - 1) / (n * 2^E)
//
// computed in float64 (2^E ranges from 2^-126 to 2^128, f from about 2^-97 to 2^157,
// which float32 cannot hold). A worker sends q = round(x * f), rounding half to even,
// and the switch returns S = sum of the n q's. The result is S / f, computed as
// S * (n * 2^E / (2^31 - 1)) in float64 and rounded once to float32.
//
// Overflow cannot happen: |x| < 2^E implies |x*f| < (2^31-1)/n, and the conversion
// clamps every q to [-L, L] with L = floor((2^31-1)/n), so |S| <= n*L <= 2^31 - 1.
// The clamp only matters when the caller passes an E below the block's own exponent
// (a bug or a lying peer): the result is then wrong but never wraps around.
//
// # Error bound
//
// For inputs of magnitude below 2^E (E being the code's power of two as above), the
// dequantized n-way sum r and the exact real sum T of the inputs satisfy
//
//	|r - T| <= ErrorBound(n, E) = n*2^E * ( n / (2*(2^31-1)) + 2^-24 + 2^-50 )
//
// The first term is n rounding errors of at most 0.5/f each (n * 0.5 / f). For
// n > 128 the clamp to L can add up to 0.5/f more per element (a float32 below 2^E
// is at most 2^E*(1-2^-24), which keeps x*f at least 0.99 below (2^31-1)/n only
// while n <= 128), so ErrorBound doubles that term for n > 128. The second
// is the float32 rounding of the output: |r| <= n*2^E, and half an ulp of any
// float32 y is at most 2^-24*|y| (denormal outputs have an absolute rounding error of
// at most 2^-150 <= 2^-24 * 2^-126). The third covers the float64 arithmetic (the
// rounding of f, of x*f, of the product S*g and of g = n*2^E/(2^31-1), each at most
// 2^-53 relative, adding up to below 2^-50 * n * 2^E). The bound holds as long as
// the result is finite: when |T| is close to or above math.MaxFloat32 the result
// may overflow to ±Inf.
//
// For n = 1 the bound is about 2^E * 6.0e-8, for n = 64 about 64*2^E * 1.5e-8.
//
// # Small values in a block
//
// The absolute error is relative to 2^E, not to each value: an element x much
// smaller than the largest element of any worker's block keeps only about
// 31 - log2(n) - (E - exponent(x)) significant bits, and an element below
// 0.5/f = n*2^E/2^32 becomes 0. For example with n = 8 and a block maximum of
// 1.0 (E = 1), values below 2^-28 (3.7e-9) vanish. This is the price of one scale per
// packet; tests pin the behaviour down.
//
// # float16 and bfloat16
//
// Half-precision inputs are raw IEEE binary16 or bfloat16 bits in uint16. They are
// widened exactly to float32 and go through the same int32 representation; the
// exponent functions work on the widened value, so float16 denormals get tight
// exponents. Results are rounded (to nearest even) from float32 to the 16-bit
// format, which adds half an ulp of that format: ErrorBoundF16 and ErrorBoundBF16
// state the bound. Results beyond the format's range become ±Inf.
//
// # The 16-bit wire
//
// QuantizePairsBE and DequantizePairsBE (and their float16 and bfloat16
// variants) carry values at 16 bits: scale (2^15-1)/(n*2^E), a clamp to
// ±floor((2^15-1)/n), and two values a, b to the 32-bit word a*2^16 + b, so
// that a switch adding 32-bit words sums both halves without a carry
// between them. ErrorBound16 states the bound; wire16.go explains the
// pairing and docs/design.md compares it with the 32-bit wire.
//
// # NaN and Inf
//
// Non-finite values have no fixed-point representation. CheckFinite (and
// CheckFiniteF16, CheckFiniteBF16) return a *NonFiniteError naming the first bad
// index and value; callers must run it before sending anything, so that a NaN never
// turns into a silently wrong sum. The conversion functions themselves never panic
// on any bit pattern, but their output for non-finite inputs is unspecified.
//
// # Buffers
//
// All conversions write into caller-provided buffers and allocate nothing. The BE
// variants read and write the big-endian int32 payload of a packet directly, so the
// network path converts once without an intermediate []int32. Like copy, every
// conversion processes min(len(dst), len(src)) elements (counting 4 bytes per
// element in a byte slice) and returns that count. int32 tensors need no
// conversion here: their payloads go through the wire package's payload codec
// (wire), the one the switch adds them with.
//
// On amd64 with AVX2 the float32 kernels run vectorised (8 elements per step,
// and 16 with AVX-512 for conversions) with exactly the arithmetic of the
// portable loops, bit for bit; the build tag purego selects the portable loops
// everywhere. The 16-bit formats widen into a
// small stack buffer and reuse the float32 kernels.
package quant
