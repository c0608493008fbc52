package ot

import "encoding/binary"

// transpose64 transposes a 64×64 bit matrix in place: bit c of a[r] (LSB first) moves to
// bit r of a[c]. Recursive block swap (Hacker's Delight §7-3): swap the off-diagonal j×j
// blocks for j = 32, 16, …, 1, all blocks of one size at once.
func transpose64(a *[64]uint64) {
	m := uint64(0x00000000FFFFFFFF)
	for j := 32; j != 0; {
		for k := 0; k < 64; k = (k + j + 1) &^ j {
			t := (a[k]>>j ^ a[k+j]) & m
			a[k] ^= t << j
			a[k+j] ^= t
		}
		j >>= 1
		m ^= m << j
	}
}

// transposeColumns turns the Kappa columns of the IKNP matrix (cols[i] holds bit j of column
// i at bit j%8 of byte j/8, len(rows)/8 bytes each) into rows: bit i of rows[j] is bit j of
// column i. len(rows) is a multiple of 128.
func transposeColumns(rows []Block, cols *[Kappa][]byte) {
	var a [4][64]uint64 // A00, A01, A10, A11: (column half, OT half)
	for c := 0; c < len(rows)/128; c++ {
		off := 16 * c
		for i := range 64 {
			a[0][i] = binary.LittleEndian.Uint64(cols[i][off:])
			a[1][i] = binary.LittleEndian.Uint64(cols[i][off+8:])
			a[2][i] = binary.LittleEndian.Uint64(cols[64+i][off:])
			a[3][i] = binary.LittleEndian.Uint64(cols[64+i][off+8:])
		}
		for q := range a {
			transpose64(&a[q])
		}
		r := rows[128*c : 128*c+128]
		for j := range 64 {
			binary.LittleEndian.PutUint64(r[j][:8], a[0][j])
			binary.LittleEndian.PutUint64(r[j][8:], a[2][j])
			binary.LittleEndian.PutUint64(r[64+j][:8], a[1][j])
			binary.LittleEndian.PutUint64(r[64+j][8:], a[3][j])
		}
	}
	clear(a[0][:])
	clear(a[1][:])
	clear(a[2][:])
	clear(a[3][:])
}
