//go:build amd64 && !purego

#include "textflag.h"

// func addBEAVX2(vals *int32, payload *byte, blocks int, shuffle *[32]byte)
TEXT ·addBEAVX2(SB), NOSPLIT, $0-32
	MOVQ    vals+0(FP), DI
	MOVQ    payload+8(FP), SI
	MOVQ    blocks+16(FP), CX
	MOVQ    shuffle+24(FP), AX
	VMOVDQU (AX), Y7

aloop:
	VMOVDQU (SI), Y0
	VPSHUFB Y7, Y0, Y0
	VPADDD  (DI), Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     aloop
	VZEROUPPER
	RET

// func copyBEAVX2(vals *int32, payload *byte, blocks int, shuffle *[32]byte)
TEXT ·copyBEAVX2(SB), NOSPLIT, $0-32
	MOVQ    vals+0(FP), DI
	MOVQ    payload+8(FP), SI
	MOVQ    blocks+16(FP), CX
	MOVQ    shuffle+24(FP), AX
	VMOVDQU (AX), Y7

cloop:
	VMOVDQU (SI), Y0
	VPSHUFB Y7, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     cloop
	VZEROUPPER
	RET

// func storeBEAVX2(dst *byte, vals *int32, blocks int, shuffle *[32]byte)
TEXT ·storeBEAVX2(SB), NOSPLIT, $0-32
	MOVQ    dst+0(FP), DI
	MOVQ    vals+8(FP), SI
	MOVQ    blocks+16(FP), CX
	MOVQ    shuffle+24(FP), AX
	VMOVDQU (AX), Y7

sloop:
	VMOVDQU (SI), Y0
	VPSHUFB Y7, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     sloop
	VZEROUPPER
	RET
