//go:build !purego

#include "textflag.h"

// AES-NI kernels (128-bit registers, legacy SSE encoding). See kernel.go for what each
// computes and kernel_amd64.go for how they are chosen.
//
// Labels are 16 bytes, slot s at L + 16·s; gate operands are uint32 triples (a, b, out).
// σ(x) = swap64(x) ⊕ (x ∧ maskHi) with maskHi = (0, ~0): lo' = hi, hi' = lo ⊕ hi.
// Tweaks are (lo = t, hi = ~0), incremented by (1, 0).
// The mask of a label's permute bit: broadcast its dword 0, shift left 31, arithmetic
// shift right 31.

// SIGMA sets dst = σ(x) using tmp; x is kept. maskHi in X10.
#define SIGMA(x, dst, tmp) \
	PSHUFD $0x4E, x, dst \
	MOVOU  x, tmp \
	PAND   X10, tmp \
	PXOR   tmp, dst

// LSBMASK sets dst to all ones if bit 0 of x is set, else zero.
#define LSBMASK(x, dst) \
	PSHUFD $0x00, x, dst \
	PSLLL  $31, dst \
	PSRAL  $31, dst

// LOADLABEL loads the label whose slot index is the uint32 at off(SI) into x, using AX.
#define LOADLABEL(off, x) \
	MOVL  off(SI), AX \
	SHLQ  $4, AX \
	MOVOU (DI)(AX*1), x

// STORELABEL stores x to the slot whose index is the uint32 at off(SI), using AX.
#define STORELABEL(x, off) \
	MOVL  off(SI), AX \
	SHLQ  $4, AX \
	MOVOU x, (DI)(AX*1)

#define ROUND8(op, off) \
	MOVOU off(R8), X13 \
	op    X13, X0 \
	op    X13, X1 \
	op    X13, X2 \
	op    X13, X3 \
	op    X13, X4 \
	op    X13, X5 \
	op    X13, X6 \
	op    X13, X7

#define PXOR8 \
	MOVOU (R8), X13 \
	PXOR  X13, X0 \
	PXOR  X13, X1 \
	PXOR  X13, X2 \
	PXOR  X13, X3 \
	PXOR  X13, X4 \
	PXOR  X13, X5 \
	PXOR  X13, X6 \
	PXOR  X13, X7

// AES8 encrypts X0–X7 under the round keys at R8 (8 blocks in flight).
#define AES8 \
	PXOR8 \
	ROUND8(AESENC, 16) \
	ROUND8(AESENC, 32) \
	ROUND8(AESENC, 48) \
	ROUND8(AESENC, 64) \
	ROUND8(AESENC, 80) \
	ROUND8(AESENC, 96) \
	ROUND8(AESENC, 112) \
	ROUND8(AESENC, 128) \
	ROUND8(AESENC, 144) \
	ROUND8(AESENCLAST, 160)

// AES1 encrypts x under the round keys at R8, using X13.
#define AES1(x) \
	MOVOU (R8), X13 \
	PXOR X13, x \
	MOVOU 16(R8), X13 \
	AESENC X13, x \
	MOVOU 32(R8), X13 \
	AESENC X13, x \
	MOVOU 48(R8), X13 \
	AESENC X13, x \
	MOVOU 64(R8), X13 \
	AESENC X13, x \
	MOVOU 80(R8), X13 \
	AESENC X13, x \
	MOVOU 96(R8), X13 \
	AESENC X13, x \
	MOVOU 112(R8), X13 \
	AESENC X13, x \
	MOVOU 128(R8), X13 \
	AESENC X13, x \
	MOVOU 144(R8), X13 \
	AESENC X13, x \
	MOVOU 160(R8), X13 \
	AESENCLAST X13, x

// func encryptAESNI(rk *Label, dst, src *Label, n int)
TEXT ·encryptAESNI(SB), NOSPLIT, $0-32
	MOVQ rk+0(FP), R8
	MOVQ dst+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX

enc8:
	CMPQ CX, $8
	JB   enc1
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVOU 64(SI), X4
	MOVOU 80(SI), X5
	MOVOU 96(SI), X6
	MOVOU 112(SI), X7
	AES8
	MOVOU X0, 0(DI)
	MOVOU X1, 16(DI)
	MOVOU X2, 32(DI)
	MOVOU X3, 48(DI)
	MOVOU X4, 64(DI)
	MOVOU X5, 80(DI)
	MOVOU X6, 96(DI)
	MOVOU X7, 112(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $8, CX
	JMP  enc8

enc1:
	TESTQ CX, CX
	JZ    encdone
	MOVOU (SI), X0
	AES1(X0)
	MOVOU X0, (DI)
	ADDQ  $16, SI
	ADDQ  $16, DI
	DECQ  CX
	JMP   enc1

encdone:
	RET

// GPRE prepares the four hash inputs of the garbled AND at off(SI) in x0..x3:
// σA⊕t, σA⊕t⊕σΔ, σB⊕t', σB⊕t'⊕σΔ, and advances the tweak (X11) by two.
#define GPRE(off, x0, x1, x2, x3) \
	LOADLABEL(off, X14) \
	SIGMA(X14, x0, X15) \
	PXOR  X11, x0 \
	PADDQ X12, X11 \
	MOVOU x0, x1 \
	PXOR  X9, x1 \
	LOADLABEL(off+4, X14) \
	SIGMA(X14, x2, X15) \
	PXOR  X11, x2 \
	PADDQ X12, X11 \
	MOVOU x2, x3 \
	PXOR  X9, x3

// GPOST finishes the garbled AND at off(SI) from E0..E3 = π of its hash inputs in
// x0..x3, writes TG ‖ TE at toff(DX) and the output zero-label:
//   TG = E0⊕E1⊕σΔ ⊕ (pb∧Δ)      (= H(A)⊕H(A⊕Δ) ⊕ pb·Δ)
//   DB = E2⊕E3⊕σΔ               (= H(B)⊕H(B⊕Δ)), TE = DB ⊕ A
//   WG = E0⊕σA ⊕ (pa∧TG), WE = E2⊕σB ⊕ (pb∧DB), C = WG ⊕ WE.
#define GPOST(off, toff, x0, x1, x2, x3) \
	PXOR  x0, x1 \
	PXOR  X9, x1 \
	PXOR  x2, x3 \
	PXOR  X9, x3 \
	LOADLABEL(off+4, X14) \
	LSBMASK(X14, X15) \
	PSHUFD $0x4E, X14, X13 \
	PXOR  X13, x2 \
	PAND  X10, X14 \
	PXOR  X14, x2 \
	MOVOU x3, X14 \
	PAND  X15, X14 \
	PXOR  X14, x2 \
	MOVOU X8, X14 \
	PAND  X15, X14 \
	PXOR  X14, x1 \
	LOADLABEL(off, X13) \
	MOVOU x1, toff(DX) \
	PXOR  X13, x3 \
	MOVOU x3, toff+16(DX) \
	LSBMASK(X13, X15) \
	PSHUFD $0x4E, X13, X14 \
	PXOR  X14, x0 \
	PAND  X10, X13 \
	PXOR  X13, x0 \
	PAND  X15, x1 \
	PXOR  x1, x0 \
	PXOR  x2, x0 \
	STORELABEL(x0, off+8)

// func garbleANDAESNI(rk *Label, c *andConsts, labels *Label, ops *uint32, n int, tab *byte, t uint64)
TEXT ·garbleANDAESNI(SB), NOSPLIT, $0-56
	MOVQ rk+0(FP), R8
	MOVQ c+8(FP), BX
	MOVQ labels+16(FP), DI
	MOVQ ops+24(FP), SI
	MOVQ n+32(FP), CX
	MOVQ tab+40(FP), DX
	MOVOU 0(BX), X8   // Δ
	MOVOU 16(BX), X9  // σΔ
	MOVOU 32(BX), X10 // maskHi
	MOVOU 48(BX), X12 // (1, 0)
	MOVQ  t+48(FP), X11
	MOVOU 32(BX), X13
	POR   X13, X11    // (t, ~0)

garble2:
	CMPQ CX, $2
	JB   garble1
	GPRE(0, X0, X1, X2, X3)
	GPRE(12, X4, X5, X6, X7)
	AES8
	GPOST(0, 0, X0, X1, X2, X3)
	GPOST(12, 32, X4, X5, X6, X7)
	ADDQ $24, SI
	ADDQ $64, DX
	SUBQ $2, CX
	JMP  garble2

garble1:
	TESTQ CX, CX
	JZ    garbledone
	GPRE(0, X0, X1, X2, X3)
	AES1(X0)
	AES1(X1)
	AES1(X2)
	AES1(X3)
	GPOST(0, 0, X0, X1, X2, X3)

garbledone:
	RET

// EPRE prepares the two hash inputs of the evaluated AND at off(SI): σA⊕t, σB⊕t'.
#define EPRE(off, x0, x1) \
	LOADLABEL(off, X14) \
	SIGMA(X14, x0, X15) \
	PXOR  X11, x0 \
	PADDQ X12, X11 \
	LOADLABEL(off+4, X14) \
	SIGMA(X14, x1, X15) \
	PXOR  X11, x1 \
	PADDQ X12, X11

// EPOST finishes the evaluated AND at off(SI) with rows TG ‖ TE at toff(DX):
//   C = E0⊕σA ⊕ (sa∧TG) ⊕ E1⊕σB ⊕ (sb∧(TE⊕A)).
#define EPOST(off, toff, x0, x1) \
	LOADLABEL(off, X13) \
	LOADLABEL(off+4, X14) \
	LSBMASK(X13, X15) \
	MOVOU toff(DX), X8 \
	PAND  X15, X8 \
	PXOR  X8, x0 \
	PSHUFD $0x4E, X13, X8 \
	PXOR  X8, x0 \
	MOVOU X13, X9 \
	PAND  X10, X9 \
	PXOR  X9, x0 \
	MOVOU toff+16(DX), X8 \
	PXOR  X13, X8 \
	LSBMASK(X14, X15) \
	PAND  X15, X8 \
	PXOR  X8, x1 \
	PSHUFD $0x4E, X14, X8 \
	PXOR  X8, x1 \
	PAND  X10, X14 \
	PXOR  X14, x1 \
	PXOR  x1, x0 \
	STORELABEL(x0, off+8)

// func evalANDAESNI(rk *Label, c *andConsts, labels *Label, ops *uint32, n int, tab *byte, t uint64)
TEXT ·evalANDAESNI(SB), NOSPLIT, $0-56
	MOVQ rk+0(FP), R8
	MOVQ c+8(FP), BX
	MOVQ labels+16(FP), DI
	MOVQ ops+24(FP), SI
	MOVQ n+32(FP), CX
	MOVQ tab+40(FP), DX
	MOVOU 32(BX), X10 // maskHi
	MOVOU 48(BX), X12 // (1, 0)
	MOVQ  t+48(FP), X11
	POR   X10, X11    // (t, ~0)

eval4:
	CMPQ CX, $4
	JB   eval1
	EPRE(0, X0, X1)
	EPRE(12, X2, X3)
	EPRE(24, X4, X5)
	EPRE(36, X6, X7)
	AES8
	EPOST(0, 0, X0, X1)
	EPOST(12, 32, X2, X3)
	EPOST(24, 64, X4, X5)
	EPOST(36, 96, X6, X7)
	ADDQ $48, SI
	ADDQ $128, DX
	SUBQ $4, CX
	JMP  eval4

eval1:
	TESTQ CX, CX
	JZ    evaldone
	EPRE(0, X0, X1)
	AES1(X0)
	AES1(X1)
	EPOST(0, 0, X0, X1)
	ADDQ $12, SI
	ADDQ $32, DX
	DECQ CX
	JMP  eval1

evaldone:
	RET

// func xorSSE(labels *Label, ops *uint32, n int)
TEXT ·xorSSE(SB), NOSPLIT, $0-24
	MOVQ labels+0(FP), DI
	MOVQ ops+8(FP), SI
	MOVQ n+16(FP), CX

xor1:
	TESTQ CX, CX
	JZ    xordone
	LOADLABEL(0, X0)
	MOVL  4(SI), AX
	SHLQ  $4, AX
	MOVOU (DI)(AX*1), X1
	PXOR  X1, X0
	STORELABEL(X0, 8)
	ADDQ  $12, SI
	DECQ  CX
	JMP   xor1

xordone:
	RET

#define VROUND8(op, off) \
	op off(R8), Y0, Y0 \
	op off(R8), Y1, Y1 \
	op off(R8), Y2, Y2 \
	op off(R8), Y3, Y3 \
	op off(R8), Y4, Y4 \
	op off(R8), Y5, Y5 \
	op off(R8), Y6, Y6 \
	op off(R8), Y7, Y7

// func encryptVAES(rk256 *[32]byte, dst, src *Label, n int)
//
// n is a multiple of 16: 16 blocks in flight, two per 256-bit register, round keys
// broadcast to both lanes (fixedKey.rk256). Needs VAES and AVX2.
TEXT ·encryptVAES(SB), NOSPLIT, $0-32
	MOVQ rk256+0(FP), R8
	MOVQ dst+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX

venc16:
	CMPQ CX, $16
	JB   vencdone
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VMOVDQU 128(SI), Y4
	VMOVDQU 160(SI), Y5
	VMOVDQU 192(SI), Y6
	VMOVDQU 224(SI), Y7
	VROUND8(VPXOR, 0)
	VROUND8(VAESENC, 32)
	VROUND8(VAESENC, 64)
	VROUND8(VAESENC, 96)
	VROUND8(VAESENC, 128)
	VROUND8(VAESENC, 160)
	VROUND8(VAESENC, 192)
	VROUND8(VAESENC, 224)
	VROUND8(VAESENC, 256)
	VROUND8(VAESENC, 288)
	VROUND8(VAESENCLAST, 320)
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	VMOVDQU Y4, 128(DI)
	VMOVDQU Y5, 160(DI)
	VMOVDQU Y6, 192(DI)
	VMOVDQU Y7, 224(DI)
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $16, CX
	JMP  venc16

vencdone:
	VZEROUPPER
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
