//go:build amd64 && !purego

#include "textflag.h"

// The 16-bit wire's kernels work on blocks of 16 values: 32 bytes of pair
// words. The scaling, rounding and clamping are the 32-bit kernels' (in
// float64, VCVTPD2DQ rounding half to even); the pairing is done on int16
// lanes. A block's values, clamped to at most 2^15-1 in magnitude, pack
// exactly into int16 (VPACKSSDW), so that each dword holds a (low half)
// and b (high half) of one word. The word a*2^16 + b has b for its low 16
// bits and a + (b < 0 ? -1 : 0) for its high 16 bits: VPSRAW $15 gives
// every half's sign, VPSRLD $16 moves b's sign under a, and VPADDW adds
// it. The shuffle then swaps the bytes of each half, which puts the high
// half first and each half big-endian: the word, big-endian. Reading a
// word back undoes the same steps: a = high half - (b < 0 ? -1 : 0), in
// 16-bit arithmetic, which is the top half of w - b for any word w.

// PACK_PAIRS scales, clamps and rounds the 16 doubles in Y0-Y3 (in
// order) as the 32-bit kernels do, then pairs them and stores the 8 words
// at (DI). It takes f, lim, nlim and the shuffle in Y8-Y11.
#define PACK_PAIRS \
	VMULPD      Y8, Y0, Y0  \
	VMULPD      Y8, Y1, Y1  \
	VMULPD      Y8, Y2, Y2  \
	VMULPD      Y8, Y3, Y3  \
	VMINPD      Y9, Y0, Y0  \
	VMINPD      Y9, Y1, Y1  \
	VMINPD      Y9, Y2, Y2  \
	VMINPD      Y9, Y3, Y3  \
	VMAXPD      Y10, Y0, Y0 \
	VMAXPD      Y10, Y1, Y1 \
	VMAXPD      Y10, Y2, Y2 \
	VMAXPD      Y10, Y3, Y3 \
	VCVTPD2DQY  Y0, X0      \
	VCVTPD2DQY  Y1, X1      \
	VCVTPD2DQY  Y2, X2      \
	VCVTPD2DQY  Y3, X3      \
	VPACKSSDW   X1, X0, X0  \
	VPACKSSDW   X3, X2, X2  \
	VINSERTI128 $1, X2, Y0, Y0 \
	VPSRAW      $15, Y0, Y1 \
	VPSRLD      $16, Y1, Y1 \
	VPADDW      Y1, Y0, Y0  \
	VPSHUFB     Y11, Y0, Y0 \
	VMOVDQU     Y0, (DI)

// UNPACK_PAIRS reads the 8 summed words at (SI) back into 16 float32
// values, 0-7 in Y5 and 8-15 in Y7, scaled by the inverse in Y8 (the
// shuffle in Y11).
#define UNPACK_PAIRS \
	VMOVDQU      (SI), Y0       \
	VPSHUFB      Y11, Y0, Y0    \
	VPSRAW       $15, Y0, Y1    \
	VPSRLD       $16, Y1, Y1    \
	VPSUBW       Y1, Y0, Y0     \
	VPMOVSXWD    X0, Y2         \
	VEXTRACTI128 $1, Y0, X0     \
	VPMOVSXWD    X0, Y3         \
	VEXTRACTI128 $1, Y2, X4     \
	VEXTRACTI128 $1, Y3, X6     \
	VCVTDQ2PD    X2, Y5         \
	VCVTDQ2PD    X4, Y4         \
	VCVTDQ2PD    X3, Y7         \
	VCVTDQ2PD    X6, Y6         \
	VMULPD       Y8, Y5, Y5     \
	VMULPD       Y8, Y4, Y4     \
	VMULPD       Y8, Y7, Y7     \
	VMULPD       Y8, Y6, Y6     \
	VCVTPD2PSY   Y5, X5         \
	VCVTPD2PSY   Y4, X4         \
	VCVTPD2PSY   Y7, X7         \
	VCVTPD2PSY   Y6, X6         \
	VINSERTF128  $1, X4, Y5, Y5 \
	VINSERTF128  $1, X6, Y7, Y7

// QUANTIZE_PROLOGUE loads the quantizing kernels' arguments.
#define QUANTIZE_PROLOGUE \
	MOVQ         dst+0(FP), DI     \
	MOVQ         src+8(FP), SI     \
	MOVQ         blocks+16(FP), CX \
	VBROADCASTSD f+24(FP), Y8      \
	VBROADCASTSD lim+32(FP), Y9    \
	VBROADCASTSD nlim+40(FP), Y10  \
	MOVQ         shuffle+48(FP), AX \
	VMOVDQU      (AX), Y11

// DEQUANTIZE_PROLOGUE loads the dequantizing kernels' arguments.
#define DEQUANTIZE_PROLOGUE \
	MOVQ         dst+0(FP), DI     \
	MOVQ         src+8(FP), SI     \
	MOVQ         blocks+16(FP), CX \
	VBROADCASTSD inv+24(FP), Y8    \
	MOVQ         shuffle+32(FP), AX \
	VMOVDQU      (AX), Y11

// func quantizePairsAVX2(dst *byte, src *float32, blocks int, f, lim, nlim float64, shuffle *[32]byte)
TEXT ·quantizePairsAVX2(SB), NOSPLIT, $0-56
	QUANTIZE_PROLOGUE
	TESTQ CX, CX
	JZ    qpdone

qploop:
	VCVTPS2PD (SI), Y0
	VCVTPS2PD 16(SI), Y1
	VCVTPS2PD 32(SI), Y2
	VCVTPS2PD 48(SI), Y3
	PACK_PAIRS
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       qploop

qpdone:
	VZEROUPPER
	RET

// func quantizeBF16PairsAVX2(dst *byte, src *uint16, blocks int, f, lim, nlim float64, shuffle *[32]byte)
// quantizePairsAVX2 on bfloat16 bits, widened in place: VPMOVZXWD and
// VPSLLD $16 make the exact float32 of each.
TEXT ·quantizeBF16PairsAVX2(SB), NOSPLIT, $0-56
	QUANTIZE_PROLOGUE
	TESTQ CX, CX
	JZ    qbdone

qbloop:
	VPMOVZXWD    (SI), Y4
	VPMOVZXWD    16(SI), Y5
	VPSLLD       $16, Y4, Y4
	VPSLLD       $16, Y5, Y5
	VCVTPS2PD    X4, Y0
	VEXTRACTI128 $1, Y4, X4
	VCVTPS2PD    X4, Y1
	VCVTPS2PD    X5, Y2
	VEXTRACTI128 $1, Y5, X5
	VCVTPS2PD    X5, Y3
	PACK_PAIRS
	ADDQ         $32, SI
	ADDQ         $32, DI
	DECQ         CX
	JNZ          qbloop

qbdone:
	VZEROUPPER
	RET

// func dequantizePairsAVX2(dst *float32, src *byte, blocks int, inv float64, shuffle *[32]byte)
TEXT ·dequantizePairsAVX2(SB), NOSPLIT, $0-40
	DEQUANTIZE_PROLOGUE
	TESTQ CX, CX
	JZ    dpdone

dploop:
	UNPACK_PAIRS
	VMOVUPS Y5, (DI)
	VMOVUPS Y7, 32(DI)
	ADDQ    $32, SI
	ADDQ    $64, DI
	DECQ    CX
	JNZ     dploop

dpdone:
	VZEROUPPER
	RET

// func dequantizeBF16PairsAVX2(dst *uint16, src *byte, blocks int, inv float64, shuffle *[32]byte)
// dequantizePairsAVX2 with each float32 sum rounded to bfloat16 (nearest,
// ties to even: add 0x7fff and the lowest kept bit, keep the top 16 bits;
// a sum is never NaN) and packed with VPACKUSDW, which packs within 128-bit
// lanes: VPERMQ puts the four quarters back in order.
TEXT ·dequantizeBF16PairsAVX2(SB), NOSPLIT, $0-40
	DEQUANTIZE_PROLOGUE
	MOVL         $1, AX
	MOVQ         AX, X13
	VPBROADCASTD X13, Y13
	MOVL         $0x7fff, AX
	MOVQ         AX, X14
	VPBROADCASTD X14, Y14
	TESTQ        CX, CX
	JZ           dbdone

dbloop:
	UNPACK_PAIRS
	VPSRLD    $16, Y5, Y1
	VPSRLD    $16, Y7, Y2
	VPAND     Y13, Y1, Y1
	VPAND     Y13, Y2, Y2
	VPADDD    Y14, Y5, Y5
	VPADDD    Y14, Y7, Y7
	VPADDD    Y1, Y5, Y5
	VPADDD    Y2, Y7, Y7
	VPSRLD    $16, Y5, Y5
	VPSRLD    $16, Y7, Y7
	VPACKUSDW Y7, Y5, Y5
	VPERMQ    $0xd8, Y5, Y5
	VMOVDQU   Y5, (DI)
	ADDQ      $32, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       dbloop

dbdone:
	VZEROUPPER
	RET

// func quantizeF16PairsAVX2(dst *byte, src *uint16, blocks int, f, lim, nlim float64, shuffle *[32]byte)
// quantizePairsAVX2 on float16 bits, widened exactly by VCVTPH2PS (F16C).
TEXT ·quantizeF16PairsAVX2(SB), NOSPLIT, $0-56
	QUANTIZE_PROLOGUE
	TESTQ CX, CX
	JZ    qhdone

qhloop:
	VCVTPH2PS    (SI), Y4
	VCVTPH2PS    16(SI), Y5
	VCVTPS2PD    X4, Y0
	VEXTRACTF128 $1, Y4, X4
	VCVTPS2PD    X4, Y1
	VCVTPS2PD    X5, Y2
	VEXTRACTF128 $1, Y5, X5
	VCVTPS2PD    X5, Y3
	PACK_PAIRS
	ADDQ         $32, SI
	ADDQ         $32, DI
	DECQ         CX
	JNZ          qhloop

qhdone:
	VZEROUPPER
	RET

// func dequantizeF16PairsAVX2(dst *uint16, src *byte, blocks int, inv float64, shuffle *[32]byte)
// dequantizePairsAVX2 with each float32 sum rounded to float16 by
// VCVTPS2PH (F16C) under its own rounding control: nearest, ties to even.
TEXT ·dequantizeF16PairsAVX2(SB), NOSPLIT, $0-40
	DEQUANTIZE_PROLOGUE
	TESTQ CX, CX
	JZ    dhdone

dhloop:
	UNPACK_PAIRS
	VCVTPS2PH   $0, Y5, X5
	VCVTPS2PH   $0, Y7, X7
	VINSERTI128 $1, X7, Y5, Y5
	VMOVDQU     Y5, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	DECQ        CX
	JNZ         dhloop

dhdone:
	VZEROUPPER
	RET

// func maxMagnitude16AVX2(src *uint16, blocks int) uint16
// The largest of blocks*16 16-bit floats' bits with the sign cleared:
// VPAND with 0x7fff, VPMAXUW, two accumulators, then a horizontal maximum.
TEXT ·maxMagnitude16AVX2(SB), NOSPLIT, $0-18
	MOVQ         src+0(FP), SI
	MOVQ         blocks+8(FP), CX
	MOVL         $0x7fff, AX
	MOVQ         AX, X7
	VPBROADCASTW X7, Y7
	VPXOR        Y0, Y0, Y0
	VPXOR        Y1, Y1, Y1
	CMPQ         CX, $2
	JLT          hone

hloop2:
	VPAND   (SI), Y7, Y2
	VPAND   32(SI), Y7, Y3
	VPMAXUW Y2, Y0, Y0
	VPMAXUW Y3, Y1, Y1
	ADDQ    $64, SI
	SUBQ    $2, CX
	CMPQ    CX, $2
	JGE     hloop2

hone:
	TESTQ   CX, CX
	JZ      hreduce
	VPAND   (SI), Y7, Y2
	VPMAXUW Y2, Y0, Y0

hreduce:
	VPMAXUW      Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXUW      X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPMAXUW      X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPMAXUW      X1, X0, X0
	VPSRLD       $16, X0, X1
	VPMAXUW      X1, X0, X0
	VMOVD        X0, AX
	MOVW         AX, ret+16(FP)
	VZEROUPPER
	RET
