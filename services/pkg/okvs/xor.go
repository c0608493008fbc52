package okvs

import (
	"crypto/subtle"
	"unsafe"
)

// maxRows is the most rows one decode XORs: the second sparse cell plus a full dense row.
const maxRows = 1 + 128

// xorRows sets dst ^= rows[0][:len(dst)] ^ rows[1][:len(dst)] ^ …. Every row must point at
// least len(dst) valid bytes; callers take the pointers as &cells[i·ℓ], which the compiler
// bounds-checks, and cells are exactly ℓ = len(dst) bytes.
//
// Decoding is a sum of about 35 rows, and XORing them one at a time with subtle.XORBytes
// reloads and stores the accumulator once per row and pays its call overhead per row (13 ns
// for a 32-byte row, about 35 % of a 32-byte decode). The assembly version keeps the
// accumulator in registers and streams each row once.
func xorRows(dst []byte, rows []*byte) {
	if len(rows) == 0 || len(dst) == 0 {
		return
	}
	n := xorRowsArch(dst, rows)
	if n == len(dst) {
		return
	}
	for _, r := range rows {
		src := unsafe.Slice(r, len(dst))
		subtle.XORBytes(dst[n:], dst[n:], src[n:])
	}
}

// xorRowsGeneric is the portable version of xorRows, also used to test the assembly.
func xorRowsGeneric(dst []byte, rows []*byte) {
	for _, r := range rows {
		subtle.XORBytes(dst, dst, unsafe.Slice(r, len(dst)))
	}
}
