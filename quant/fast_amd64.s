//go:build amd64 && !purego

#include "textflag.h"

// Both kernels work on blocks of 8 elements, two blocks per iteration while at
// least two remain, so that independent conversions overlap.

// func quantizeAVX2(dst *byte, src *float32, blocks int, f, lim, nlim float64, shuffle *[32]byte)
TEXT ·quantizeAVX2(SB), NOSPLIT, $0-56
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         blocks+16(FP), CX
	VBROADCASTSD f+24(FP), Y8
	VBROADCASTSD lim+32(FP), Y9
	VBROADCASTSD nlim+40(FP), Y10
	MOVQ         shuffle+48(FP), AX
	VMOVDQU      (AX), Y11
	CMPQ         CX, $2
	JLT          qone

qloop2:
	VCVTPS2PD   (SI), Y0
	VCVTPS2PD   16(SI), Y1
	VCVTPS2PD   32(SI), Y2
	VCVTPS2PD   48(SI), Y3
	VMULPD      Y8, Y0, Y0
	VMULPD      Y8, Y1, Y1
	VMULPD      Y8, Y2, Y2
	VMULPD      Y8, Y3, Y3
	VMINPD      Y9, Y0, Y0
	VMINPD      Y9, Y1, Y1
	VMINPD      Y9, Y2, Y2
	VMINPD      Y9, Y3, Y3
	VMAXPD      Y10, Y0, Y0
	VMAXPD      Y10, Y1, Y1
	VMAXPD      Y10, Y2, Y2
	VMAXPD      Y10, Y3, Y3
	VCVTPD2DQY  Y0, X0
	VCVTPD2DQY  Y1, X1
	VCVTPD2DQY  Y2, X2
	VCVTPD2DQY  Y3, X3
	VINSERTI128 $1, X1, Y0, Y0
	VINSERTI128 $1, X3, Y2, Y2
	VPSHUFB     Y11, Y0, Y0
	VPSHUFB     Y11, Y2, Y2
	VMOVDQU     Y0, (DI)
	VMOVDQU     Y2, 32(DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $2, CX
	CMPQ        CX, $2
	JGE         qloop2

qone:
	TESTQ       CX, CX
	JZ          qdone
	VCVTPS2PD   (SI), Y0
	VCVTPS2PD   16(SI), Y1
	VMULPD      Y8, Y0, Y0
	VMULPD      Y8, Y1, Y1
	VMINPD      Y9, Y0, Y0
	VMINPD      Y9, Y1, Y1
	VMAXPD      Y10, Y0, Y0
	VMAXPD      Y10, Y1, Y1
	VCVTPD2DQY  Y0, X0
	VCVTPD2DQY  Y1, X1
	VINSERTI128 $1, X1, Y0, Y0
	VPSHUFB     Y11, Y0, Y0
	VMOVDQU     Y0, (DI)

qdone:
	VZEROUPPER
	RET

// func dequantizeAVX2(dst *float32, src *byte, blocks int, inv float64, shuffle *[32]byte)
TEXT ·dequantizeAVX2(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         blocks+16(FP), CX
	VBROADCASTSD inv+24(FP), Y8
	MOVQ         shuffle+32(FP), AX
	VMOVDQU      (AX), Y11
	CMPQ         CX, $2
	JLT          done

dloop2:
	VMOVDQU      (SI), Y0
	VMOVDQU      32(SI), Y4
	VPSHUFB      Y11, Y0, Y0
	VPSHUFB      Y11, Y4, Y4
	VEXTRACTI128 $1, Y0, X2
	VEXTRACTI128 $1, Y4, X6
	VCVTDQ2PD    X0, Y1
	VCVTDQ2PD    X2, Y2
	VCVTDQ2PD    X4, Y5
	VCVTDQ2PD    X6, Y6
	VMULPD       Y8, Y1, Y1
	VMULPD       Y8, Y2, Y2
	VMULPD       Y8, Y5, Y5
	VMULPD       Y8, Y6, Y6
	VCVTPD2PSY   Y1, X1
	VCVTPD2PSY   Y2, X2
	VCVTPD2PSY   Y5, X5
	VCVTPD2PSY   Y6, X6
	VINSERTF128  $1, X2, Y1, Y1
	VINSERTF128  $1, X6, Y5, Y5
	VMOVUPS      Y1, (DI)
	VMOVUPS      Y5, 32(DI)
	ADDQ         $64, SI
	ADDQ         $64, DI
	SUBQ         $2, CX
	CMPQ         CX, $2
	JGE          dloop2

done:
	TESTQ        CX, CX
	JZ           ddone
	VMOVDQU      (SI), Y0
	VPSHUFB      Y11, Y0, Y0
	VEXTRACTI128 $1, Y0, X2
	VCVTDQ2PD    X0, Y1
	VCVTDQ2PD    X2, Y2
	VMULPD       Y8, Y1, Y1
	VMULPD       Y8, Y2, Y2
	VCVTPD2PSY   Y1, X1
	VCVTPD2PSY   Y2, X2
	VINSERTF128  $1, X2, Y1, Y1
	VMOVUPS      Y1, (DI)

ddone:
	VZEROUPPER
	RET

// func maxAbsBitsAVX2(src *float32, blocks int) uint32
// The largest |x| as bits (sign cleared) over blocks*8 elements: VPAND with
// 0x7fffffff, VPMAXUD, two accumulators, then a horizontal maximum.
TEXT ·maxAbsBitsAVX2(SB), NOSPLIT, $0-20
	MOVQ         src+0(FP), SI
	MOVQ         blocks+8(FP), CX
	MOVQ         $0x7fffffff, AX
	MOVQ         AX, X7
	VPBROADCASTD X7, Y7
	VPXOR        Y0, Y0, Y0
	VPXOR        Y1, Y1, Y1
	CMPQ         CX, $2
	JLT          mone

mloop2:
	VPAND   (SI), Y7, Y2
	VPAND   32(SI), Y7, Y3
	VPMAXUD Y2, Y0, Y0
	VPMAXUD Y3, Y1, Y1
	ADDQ    $64, SI
	SUBQ    $2, CX
	CMPQ    CX, $2
	JGE     mloop2

mone:
	TESTQ   CX, CX
	JZ      mreduce
	VPAND   (SI), Y7, Y2
	VPMAXUD Y2, Y0, Y0

mreduce:
	VPMAXUD      Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXUD      X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPMAXUD      X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPMAXUD      X1, X0, X0
	VMOVD        X0, AX
	MOVL         AX, ret+16(FP)
	VZEROUPPER
	RET
