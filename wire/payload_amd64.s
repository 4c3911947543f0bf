//go:build amd64 && !purego

#include "textflag.h"

// VPSHUFB control that reverses the bytes of every 32-bit element (it
// shuffles within each 128-bit half, so the pattern repeats).
DATA swap32<>+0(SB)/8, $0x0405060700010203
DATA swap32<>+8(SB)/8, $0x0c0d0e0f08090a0b
DATA swap32<>+16(SB)/8, $0x0405060700010203
DATA swap32<>+24(SB)/8, $0x0c0d0e0f08090a0b
GLOBL swap32<>(SB), RODATA|NOPTR, $32

// Both kernels take two blocks of 8 elements per iteration while at least
// two remain, so that the loop overhead is spread over 64 bytes.

// func swapAVX2(dst, src *byte, blocks int)
TEXT ·swapAVX2(SB), NOSPLIT, $0-24
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    blocks+16(FP), CX
	VMOVDQU swap32<>(SB), Y7
	CMPQ    CX, $2
	JLT     sone

sloop2:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VPSHUFB Y7, Y0, Y0
	VPSHUFB Y7, Y1, Y1
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $2, CX
	CMPQ    CX, $2
	JGE     sloop2

sone:
	TESTQ   CX, CX
	JZ      sdone
	VMOVDQU (SI), Y0
	VPSHUFB Y7, Y0, Y0
	VMOVDQU Y0, (DI)

sdone:
	VZEROUPPER
	RET

// func addAVX2(vals *int32, payload *byte, blocks int)
TEXT ·addAVX2(SB), NOSPLIT, $0-24
	MOVQ    vals+0(FP), DI
	MOVQ    payload+8(FP), SI
	MOVQ    blocks+16(FP), CX
	VMOVDQU swap32<>(SB), Y7
	CMPQ    CX, $2
	JLT     aone

aloop2:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VPSHUFB Y7, Y0, Y0
	VPSHUFB Y7, Y1, Y1
	VPADDD  (DI), Y0, Y0
	VPADDD  32(DI), Y1, Y1
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $2, CX
	CMPQ    CX, $2
	JGE     aloop2

aone:
	TESTQ   CX, CX
	JZ      adone
	VMOVDQU (SI), Y0
	VPSHUFB Y7, Y0, Y0
	VPADDD  (DI), Y0, Y0
	VMOVDQU Y0, (DI)

adone:
	VZEROUPPER
	RET
