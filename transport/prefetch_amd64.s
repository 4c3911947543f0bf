//go:build amd64 && !purego

#include "textflag.h"

// func prefetchLines(p *byte, n int)
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ  p+0(FP), SI
	MOVQ  n+8(FP), CX
	TESTQ CX, CX
	JLE   rdone

rloop:
	PREFETCHT0 (SI)
	ADDQ       $64, SI
	SUBQ       $1, CX
	JNZ        rloop

rdone:
	RET
