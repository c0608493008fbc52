//go:build !purego

package okvs

import "golang.org/x/sys/cpu"

var useAVX2 = cpu.X86.HasAVX2

// xorRowsAVX2 XORs the first nbytes&^7 bytes of each of the nrows rows into dst.
//
//go:noescape
func xorRowsAVX2(dst *byte, rows **byte, nrows, nbytes int)

// xorRowsArch handles a prefix of dst and returns its length.
func xorRowsArch(dst []byte, rows []*byte) int {
	if !useAVX2 {
		xorRowsGeneric(dst, rows)
		return len(dst)
	}
	xorRowsAVX2(&dst[0], &rows[0], len(rows), len(dst))
	return len(dst) &^ 7
}
