package okvs

import (
	"crypto/subtle"
	"math/bits"
)

// xorDenseRow XORs ⟨r, D_dense⟩ into out, one dense cell per set bit of r. A row has about
// (d+λ)/2 set bits, so this is the bulk of a single Decode.
func xorDenseRow(out, dense []byte, l int, r0, r1 uint64) {
	var rows [maxRows]*byte
	xorRows(out, appendDenseRows(rows[:0], dense, l, r0, r1))
}

// appendDenseRows appends a pointer to dense cell i for every set bit i of r.
func appendDenseRows(rows []*byte, dense []byte, l int, r0, r1 uint64) []*byte {
	for r0 != 0 {
		i := bits.TrailingZeros64(r0)
		r0 &= r0 - 1
		rows = append(rows, &dense[i*l])
	}
	for r1 != 0 {
		i := 64 + bits.TrailingZeros64(r1)
		r1 &= r1 - 1
		rows = append(rows, &dense[i*l])
	}
	return rows
}

// combTable is the "method of four Russians" for ⟨r, D_dense⟩: the dense columns are cut into
// chunks of combBits columns, and for each chunk the XOR of every subset of its cells is
// precomputed. An inner product then costs one XOR per chunk (⌈(d+λ)/combBits⌉, 17 at
// n = 100k) instead of one per set bit (about 33). Building it costs one XOR per entry, so it
// pays for itself after a few dozen rows; Encode's unpeeling and large DecodeBatch calls use it.
type combTable struct {
	l      int
	chunks int
	buf    []byte // chunk k, subset x is at (k<<combBits + x)·l
}

// combBits is the chunk width. With 1 KiB values a 4-bit table is 16 KiB per chunk (272 KiB
// at n = 100k) and stays in L2. 8-bit chunks halve the XOR count, but measured no faster
// beyond noise at n = 100k × 1 KiB, while the table grows 8× (2.3 MiB; 9 MiB at 4 KiB values)
// and DecodeBatch would need batches of over 4,600 keys to use it.
const combBits = 4

// combWorthIt reports whether building a combTable for `rows` inner products saves work:
// building costs about chunks·2^combBits XORs, and each row then saves about
// dense/2 − chunks XORs.
func combWorthIt(dense, rows int) bool {
	chunks := (dense + combBits - 1) / combBits
	saved := dense/2 - chunks
	return saved > 0 && rows*saved > 2*chunks<<combBits
}

// newCombTable builds the subset table for the dense cells in dense (ndense cells of l bytes).
// buf is reused if it is large enough.
func newCombTable(buf, dense []byte, ndense, l int) combTable {
	chunks := (ndense + combBits - 1) / combBits
	size := chunks << combBits * l
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	for k := range chunks {
		base := k << combBits
		clear(buf[base*l : base*l+l]) // the empty subset
		width := min(combBits, ndense-k*combBits)
		for x := 1; x < 1<<combBits; x++ {
			e := buf[(base+x)*l : (base+x)*l+l]
			if x >= 1<<width {
				// Unreachable subsets of the last, narrower chunk: the row bits there are
				// masked to zero. Clear them so the table has no stale bytes.
				clear(e)
				continue
			}
			// x = (x with its lowest bit cleared) ∪ {that bit}: one XOR per entry.
			low := bits.TrailingZeros(uint(x))
			prev := base + x&(x-1)
			col := k*combBits + low
			subtle.XORBytes(e, buf[prev*l:prev*l+l], dense[col*l:col*l+l])
		}
	}
	return combTable{l: l, chunks: chunks, buf: buf}
}

// appendRows appends the table entries whose XOR is ⟨r, D_dense⟩.
func (c *combTable) appendRows(rows []*byte, r0, r1 uint64) []*byte {
	const perWord = 64 / combBits
	const mask = 1<<combBits - 1
	for k := 0; k < c.chunks; k++ {
		var x uint64
		if k < perWord {
			x = r0 >> (k * combBits) & mask
		} else {
			x = r1 >> ((k - perWord) * combBits) & mask
		}
		if x != 0 {
			rows = append(rows, &c.buf[(k<<combBits+int(x))*c.l])
		}
	}
	return rows
}

// xorRow XORs ⟨r, D_dense⟩ into out.
func (c *combTable) xorRow(out []byte, r0, r1 uint64) {
	var rows [maxRows]*byte
	xorRows(out, c.appendRows(rows[:0], r0, r1))
}
