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

// func swapAVX2(dst, src *byte, blocks int, shuffle *[32]byte)
// Copies blocks*32 bytes, reversing the bytes of every 32-bit element: both
// payload to values and values to payload.
TEXT ·swapAVX2(SB), NOSPLIT, $0-32
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
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
