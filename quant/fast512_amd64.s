//go:build amd64 && !purego

#include "textflag.h"

// The AVX-512 kernels work on blocks of 16 elements, two blocks per
// iteration while at least two remain. They compute exactly what the AVX2
// kernels do, eight doubles at a time instead of four.

// func quantizeAVX512(dst *byte, src *float32, blocks int, f, lim, nlim float64, shuffle *[32]byte)
TEXT ·quantizeAVX512(SB), NOSPLIT, $0-56
	MOVQ            dst+0(FP), DI
	MOVQ            src+8(FP), SI
	MOVQ            blocks+16(FP), CX
	VBROADCASTSD    f+24(FP), Z8
	VBROADCASTSD    lim+32(FP), Z9
	VBROADCASTSD    nlim+40(FP), Z10
	MOVQ            shuffle+48(FP), AX
	VBROADCASTI32X4 (AX), Z11
	CMPQ            CX, $2
	JLT             qone

qloop2:
	VCVTPS2PD    (SI), Z0
	VCVTPS2PD    32(SI), Z1
	VCVTPS2PD    64(SI), Z2
	VCVTPS2PD    96(SI), Z3
	VMULPD       Z8, Z0, Z0
	VMULPD       Z8, Z1, Z1
	VMULPD       Z8, Z2, Z2
	VMULPD       Z8, Z3, Z3
	VMINPD       Z9, Z0, Z0
	VMINPD       Z9, Z1, Z1
	VMINPD       Z9, Z2, Z2
	VMINPD       Z9, Z3, Z3
	VMAXPD       Z10, Z0, Z0
	VMAXPD       Z10, Z1, Z1
	VMAXPD       Z10, Z2, Z2
	VMAXPD       Z10, Z3, Z3
	VCVTPD2DQ    Z0, Y0
	VCVTPD2DQ    Z1, Y1
	VCVTPD2DQ    Z2, Y2
	VCVTPD2DQ    Z3, Y3
	VINSERTI64X4 $1, Y1, Z0, Z0
	VINSERTI64X4 $1, Y3, Z2, Z2
	VPSHUFB      Z11, Z0, Z0
	VPSHUFB      Z11, Z2, Z2
	VMOVDQU32    Z0, (DI)
	VMOVDQU32    Z2, 64(DI)
	ADDQ         $128, SI
	ADDQ         $128, DI
	SUBQ         $2, CX
	CMPQ         CX, $2
	JGE          qloop2

qone:
	TESTQ        CX, CX
	JZ           qdone
	VCVTPS2PD    (SI), Z0
	VCVTPS2PD    32(SI), Z1
	VMULPD       Z8, Z0, Z0
	VMULPD       Z8, Z1, Z1
	VMINPD       Z9, Z0, Z0
	VMINPD       Z9, Z1, Z1
	VMAXPD       Z10, Z0, Z0
	VMAXPD       Z10, Z1, Z1
	VCVTPD2DQ    Z0, Y0
	VCVTPD2DQ    Z1, Y1
	VINSERTI64X4 $1, Y1, Z0, Z0
	VPSHUFB      Z11, Z0, Z0
	VMOVDQU32    Z0, (DI)

qdone:
	VZEROUPPER
	RET

// func dequantizeAVX512(dst *float32, src *byte, blocks int, inv float64, shuffle *[32]byte)
TEXT ·dequantizeAVX512(SB), NOSPLIT, $0-40
	MOVQ            dst+0(FP), DI
	MOVQ            src+8(FP), SI
	MOVQ            blocks+16(FP), CX
	VBROADCASTSD    inv+24(FP), Z8
	MOVQ            shuffle+32(FP), AX
	VBROADCASTI32X4 (AX), Z11
	CMPQ            CX, $2
	JLT             done

dloop2:
	VMOVDQU32     (SI), Z0
	VMOVDQU32     64(SI), Z4
	VPSHUFB       Z11, Z0, Z0
	VPSHUFB       Z11, Z4, Z4
	VEXTRACTI64X4 $1, Z0, Y2
	VEXTRACTI64X4 $1, Z4, Y6
	VCVTDQ2PD     Y0, Z1
	VCVTDQ2PD     Y2, Z2
	VCVTDQ2PD     Y4, Z5
	VCVTDQ2PD     Y6, Z6
	VMULPD        Z8, Z1, Z1
	VMULPD        Z8, Z2, Z2
	VMULPD        Z8, Z5, Z5
	VMULPD        Z8, Z6, Z6
	VCVTPD2PS     Z1, Y1
	VCVTPD2PS     Z2, Y2
	VCVTPD2PS     Z5, Y5
	VCVTPD2PS     Z6, Y6
	VINSERTF64X4  $1, Y2, Z1, Z1
	VINSERTF64X4  $1, Y6, Z5, Z5
	VMOVUPS       Z1, (DI)
	VMOVUPS       Z5, 64(DI)
	ADDQ          $128, SI
	ADDQ          $128, DI
	SUBQ          $2, CX
	CMPQ          CX, $2
	JGE           dloop2

done:
	TESTQ         CX, CX
	JZ            ddone
	VMOVDQU32     (SI), Z0
	VPSHUFB       Z11, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y2
	VCVTDQ2PD     Y0, Z1
	VCVTDQ2PD     Y2, Z2
	VMULPD        Z8, Z1, Z1
	VMULPD        Z8, Z2, Z2
	VCVTPD2PS     Z1, Y1
	VCVTPD2PS     Z2, Y2
	VINSERTF64X4  $1, Y2, Z1, Z1
	VMOVUPS       Z1, (DI)

ddone:
	VZEROUPPER
	RET
