//go:build amd64 && !purego

#include "textflag.h"

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
	TESTQ        CX, CX
	JZ           qdone

qloop:
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
	ADDQ        $32, SI
	ADDQ        $32, DI
	DECQ        CX
	JNZ         qloop

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
	TESTQ        CX, CX
	JZ           ddone

dloop:
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
	ADDQ         $32, SI
	ADDQ         $32, DI
	DECQ         CX
	JNZ          dloop

ddone:
	VZEROUPPER
	RET
