//go:build !purego

#include "textflag.h"

// func xorRowsAVX2(dst *byte, rows **byte, nrows, nbytes int)
//
// For each block of dst (128, then 32, then 8 bytes), load the block into registers, XOR
// in the same block of every row, and store it once. nrows ≥ 1.
TEXT ·xorRowsAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ rows+8(FP), SI
	MOVQ nrows+16(FP), CX
	MOVQ nbytes+24(FP), DX
	XORQ R8, R8 // byte offset of the current block

loop128:
	LEAQ 128(R8), AX
	CMPQ AX, DX
	JA   loop32
	VMOVDQU 0(DI)(R8*1), Y0
	VMOVDQU 32(DI)(R8*1), Y1
	VMOVDQU 64(DI)(R8*1), Y2
	VMOVDQU 96(DI)(R8*1), Y3
	XORQ R9, R9

rows128:
	MOVQ  (SI)(R9*8), R10
	VPXOR 0(R10)(R8*1), Y0, Y0
	VPXOR 32(R10)(R8*1), Y1, Y1
	VPXOR 64(R10)(R8*1), Y2, Y2
	VPXOR 96(R10)(R8*1), Y3, Y3
	INCQ  R9
	CMPQ  R9, CX
	JB    rows128
	VMOVDQU Y0, 0(DI)(R8*1)
	VMOVDQU Y1, 32(DI)(R8*1)
	VMOVDQU Y2, 64(DI)(R8*1)
	VMOVDQU Y3, 96(DI)(R8*1)
	MOVQ AX, R8
	JMP  loop128

loop32:
	LEAQ 32(R8), AX
	CMPQ AX, DX
	JA   loop8
	VMOVDQU (DI)(R8*1), Y0
	XORQ R9, R9

rows32:
	MOVQ  (SI)(R9*8), R10
	VPXOR (R10)(R8*1), Y0, Y0
	INCQ  R9
	CMPQ  R9, CX
	JB    rows32
	VMOVDQU Y0, (DI)(R8*1)
	MOVQ AX, R8
	JMP  loop32

loop8:
	LEAQ 8(R8), AX
	CMPQ AX, DX
	JA   done
	MOVQ (DI)(R8*1), R11
	XORQ R9, R9

rows8:
	MOVQ (SI)(R9*8), R10
	XORQ (R10)(R8*1), R11
	INCQ R9
	CMPQ R9, CX
	JB   rows8
	MOVQ R11, (DI)(R8*1)
	MOVQ AX, R8
	JMP  loop8

done:
	VZEROUPPER
	RET
