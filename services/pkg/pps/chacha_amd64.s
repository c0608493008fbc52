//go:build !purego

#include "textflag.h"

// One ChaCha20 quarter round on 16 lanes (AVX-512F: VPROLD rotates in one instruction).
#define QR(a, b, c, d) \
	VPADDD b, a, a \
	VPXORD a, d, d \
	VPROLD $16, d, d \
	VPADDD d, c, c \
	VPXORD c, b, b \
	VPROLD $12, b, b \
	VPADDD b, a, a \
	VPXORD a, d, d \
	VPROLD $8, d, d \
	VPADDD d, c, c \
	VPXORD c, b, b \
	VPROLD $7, b, b

// func chacha20x16AVX512(state *[16]uint32, lanes *[16]uint32, out *[256]uint32)
//
// Sixteen ChaCha20 blocks of one key and nonce, block counters state[12]+lanes[i] (lanes
// is 0…15), word-major: out[16w+i] is word w of block i (state added). Z16–Z31 hold the
// input state; every vector register used is zeroed before returning.
TEXT ·chacha20x16AVX512(SB), NOSPLIT, $0-24
	MOVQ state+0(FP), SI
	MOVQ lanes+8(FP), BX
	MOVQ out+16(FP), DI

	VPBROADCASTD 0(SI), Z16
	VPBROADCASTD 4(SI), Z17
	VPBROADCASTD 8(SI), Z18
	VPBROADCASTD 12(SI), Z19
	VPBROADCASTD 16(SI), Z20
	VPBROADCASTD 20(SI), Z21
	VPBROADCASTD 24(SI), Z22
	VPBROADCASTD 28(SI), Z23
	VPBROADCASTD 32(SI), Z24
	VPBROADCASTD 36(SI), Z25
	VPBROADCASTD 40(SI), Z26
	VPBROADCASTD 44(SI), Z27
	VPBROADCASTD 48(SI), Z28
	VPBROADCASTD 52(SI), Z29
	VPBROADCASTD 56(SI), Z30
	VPBROADCASTD 60(SI), Z31
	VMOVDQU32 (BX), Z0
	VPADDD    Z0, Z28, Z28

	VMOVDQA32 Z16, Z0
	VMOVDQA32 Z17, Z1
	VMOVDQA32 Z18, Z2
	VMOVDQA32 Z19, Z3
	VMOVDQA32 Z20, Z4
	VMOVDQA32 Z21, Z5
	VMOVDQA32 Z22, Z6
	VMOVDQA32 Z23, Z7
	VMOVDQA32 Z24, Z8
	VMOVDQA32 Z25, Z9
	VMOVDQA32 Z26, Z10
	VMOVDQA32 Z27, Z11
	VMOVDQA32 Z28, Z12
	VMOVDQA32 Z29, Z13
	VMOVDQA32 Z30, Z14
	VMOVDQA32 Z31, Z15

	MOVQ $10, CX

rounds:
	QR(Z0, Z4, Z8, Z12)
	QR(Z1, Z5, Z9, Z13)
	QR(Z2, Z6, Z10, Z14)
	QR(Z3, Z7, Z11, Z15)
	QR(Z0, Z5, Z10, Z15)
	QR(Z1, Z6, Z11, Z12)
	QR(Z2, Z7, Z8, Z13)
	QR(Z3, Z4, Z9, Z14)
	DECQ CX
	JNZ  rounds

	VPADDD Z16, Z0, Z0
	VPADDD Z17, Z1, Z1
	VPADDD Z18, Z2, Z2
	VPADDD Z19, Z3, Z3
	VPADDD Z20, Z4, Z4
	VPADDD Z21, Z5, Z5
	VPADDD Z22, Z6, Z6
	VPADDD Z23, Z7, Z7
	VPADDD Z24, Z8, Z8
	VPADDD Z25, Z9, Z9
	VPADDD Z26, Z10, Z10
	VPADDD Z27, Z11, Z11
	VPADDD Z28, Z12, Z12
	VPADDD Z29, Z13, Z13
	VPADDD Z30, Z14, Z14
	VPADDD Z31, Z15, Z15
	VMOVDQU32 Z0, 0(DI)
	VMOVDQU32 Z1, 64(DI)
	VMOVDQU32 Z2, 128(DI)
	VMOVDQU32 Z3, 192(DI)
	VMOVDQU32 Z4, 256(DI)
	VMOVDQU32 Z5, 320(DI)
	VMOVDQU32 Z6, 384(DI)
	VMOVDQU32 Z7, 448(DI)
	VMOVDQU32 Z8, 512(DI)
	VMOVDQU32 Z9, 576(DI)
	VMOVDQU32 Z10, 640(DI)
	VMOVDQU32 Z11, 704(DI)
	VMOVDQU32 Z12, 768(DI)
	VMOVDQU32 Z13, 832(DI)
	VMOVDQU32 Z14, 896(DI)
	VMOVDQU32 Z15, 960(DI)

	// Erase the key and keystream from the registers.
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	VZEROALL
	RET

// One ChaCha20 quarter round on 8 lanes (AVX2): the 16- and 8-bit rotations are byte
// shuffles, the 12- and 7-bit ones two shifts and an OR through Y15.
#define QR8(a, b, c, d) \
	VPADDD  b, a, a \
	VPXOR   a, d, d \
	VPSHUFB ·rot16<>(SB), d, d \
	VPADDD  d, c, c \
	VPXOR   c, b, b \
	VPSLLD  $12, b, Y15 \
	VPSRLD  $20, b, b \
	VPOR    Y15, b, b \
	VPADDD  b, a, a \
	VPXOR   a, d, d \
	VPSHUFB ·rot8<>(SB), d, d \
	VPADDD  d, c, c \
	VPXOR   c, b, b \
	VPSLLD  $7, b, Y15 \
	VPSRLD  $25, b, b \
	VPOR    Y15, b, b

DATA ·rot16<>+0x00(SB)/8, $0x0504070601000302
DATA ·rot16<>+0x08(SB)/8, $0x0D0C0F0E09080B0A
DATA ·rot16<>+0x10(SB)/8, $0x0504070601000302
DATA ·rot16<>+0x18(SB)/8, $0x0D0C0F0E09080B0A
GLOBL ·rot16<>(SB), RODATA|NOPTR, $32

DATA ·rot8<>+0x00(SB)/8, $0x0605040702010003
DATA ·rot8<>+0x08(SB)/8, $0x0E0D0C0F0A09080B
DATA ·rot8<>+0x10(SB)/8, $0x0605040702010003
DATA ·rot8<>+0x18(SB)/8, $0x0E0D0C0F0A09080B
GLOBL ·rot8<>(SB), RODATA|NOPTR, $32

// func chacha20x8AVX2(state *[16]uint32, lanes *[8]uint32, out *uint32)
//
// Eight ChaCha20 blocks of one key and nonce, block counters state[12]+lanes[i], state
// added, written with a stride of 16 words: out[16w+i] is word w of block i — so two calls,
// the second with lanes 8…15 and out+32 bytes, fill chacha20x16AVX512's layout. AVX2 has 16
// vector registers: Y15 is the rotations' temporary, and words 12 and 15 take turns in Y12
// (the other in the frame): each column and diagonal round does the three quarter rounds
// without it first. The frame and every vector register used are zeroed before returning.
TEXT ·chacha20x8AVX2(SB), NOSPLIT, $64-24
	MOVQ state+0(FP), SI
	MOVQ lanes+8(FP), BX
	MOVQ out+16(FP), DI

	VPBROADCASTD 0(SI), Y0
	VPBROADCASTD 4(SI), Y1
	VPBROADCASTD 8(SI), Y2
	VPBROADCASTD 12(SI), Y3
	VPBROADCASTD 16(SI), Y4
	VPBROADCASTD 20(SI), Y5
	VPBROADCASTD 24(SI), Y6
	VPBROADCASTD 28(SI), Y7
	VPBROADCASTD 32(SI), Y8
	VPBROADCASTD 36(SI), Y9
	VPBROADCASTD 40(SI), Y10
	VPBROADCASTD 44(SI), Y11
	VPBROADCASTD 48(SI), Y12
	VPADDD       (BX), Y12, Y12
	VPBROADCASTD 52(SI), Y13
	VPBROADCASTD 56(SI), Y14
	VPBROADCASTD 60(SI), Y15
	VMOVDQU      Y15, 32(SP) // word 15

	MOVQ $10, CX

rounds8:
	// Column round; Y12 = word 12.
	QR8(Y0, Y4, Y8, Y12)
	QR8(Y1, Y5, Y9, Y13)
	QR8(Y2, Y6, Y10, Y14)
	VMOVDQU Y12, 0(SP)
	VMOVDQU 32(SP), Y12 // word 15
	QR8(Y3, Y7, Y11, Y12)
	// Diagonal round; Y12 = word 15.
	QR8(Y0, Y5, Y10, Y12)
	QR8(Y2, Y7, Y8, Y13)
	QR8(Y3, Y4, Y9, Y14)
	VMOVDQU Y12, 32(SP)
	VMOVDQU 0(SP), Y12 // word 12
	QR8(Y1, Y6, Y11, Y12)
	DECQ CX
	JNZ  rounds8

	VPBROADCASTD 0(SI), Y15
	VPADDD       Y15, Y0, Y0
	VMOVDQU      Y0, 0(DI)
	VPBROADCASTD 4(SI), Y15
	VPADDD       Y15, Y1, Y1
	VMOVDQU      Y1, 64(DI)
	VPBROADCASTD 8(SI), Y15
	VPADDD       Y15, Y2, Y2
	VMOVDQU      Y2, 128(DI)
	VPBROADCASTD 12(SI), Y15
	VPADDD       Y15, Y3, Y3
	VMOVDQU      Y3, 192(DI)
	VPBROADCASTD 16(SI), Y15
	VPADDD       Y15, Y4, Y4
	VMOVDQU      Y4, 256(DI)
	VPBROADCASTD 20(SI), Y15
	VPADDD       Y15, Y5, Y5
	VMOVDQU      Y5, 320(DI)
	VPBROADCASTD 24(SI), Y15
	VPADDD       Y15, Y6, Y6
	VMOVDQU      Y6, 384(DI)
	VPBROADCASTD 28(SI), Y15
	VPADDD       Y15, Y7, Y7
	VMOVDQU      Y7, 448(DI)
	VPBROADCASTD 32(SI), Y15
	VPADDD       Y15, Y8, Y8
	VMOVDQU      Y8, 512(DI)
	VPBROADCASTD 36(SI), Y15
	VPADDD       Y15, Y9, Y9
	VMOVDQU      Y9, 576(DI)
	VPBROADCASTD 40(SI), Y15
	VPADDD       Y15, Y10, Y10
	VMOVDQU      Y10, 640(DI)
	VPBROADCASTD 44(SI), Y15
	VPADDD       Y15, Y11, Y11
	VMOVDQU      Y11, 704(DI)
	VPBROADCASTD 48(SI), Y15
	VPADDD       (BX), Y15, Y15
	VPADDD       Y15, Y12, Y12
	VMOVDQU      Y12, 768(DI)
	VPBROADCASTD 52(SI), Y15
	VPADDD       Y15, Y13, Y13
	VMOVDQU      Y13, 832(DI)
	VPBROADCASTD 56(SI), Y15
	VPADDD       Y15, Y14, Y14
	VMOVDQU      Y14, 896(DI)
	VMOVDQU      32(SP), Y12
	VPBROADCASTD 60(SI), Y15
	VPADDD       Y15, Y12, Y12
	VMOVDQU      Y12, 960(DI)

	// Erase the key and keystream from the frame and the registers.
	VPXOR   Y15, Y15, Y15
	VMOVDQU Y15, 0(SP)
	VMOVDQU Y15, 32(SP)
	VZEROALL
	RET
