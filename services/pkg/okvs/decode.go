package okvs

import "slices"

// Decode appends the decoded value to dst and returns it: ValueSize bytes equal to the value
// encoded under key, or, for a key that was not encoded, bytes that are indistinguishable from
// random (spec §4.1). It never fails: every key decodes to something.
func (t *Table) Decode(dst, key []byte) []byte {
	l := t.p.valueSize
	dst = slices.Grow(dst, l)
	out := dst[len(dst) : len(dst)+l]
	t.decodeInto(out, key)
	return dst[:len(dst)+l]
}

// DecodeBatch decodes every key and appends len(keys)·ValueSize bytes to dst: the value of
// keys[i] is at offset i·ValueSize of the appended bytes. It returns exactly what a loop of
// Decode would, faster: it overlaps the memory latency of several keys, and for large batches
// it computes the dense inner products with the subset table of dense.go.
func (t *Table) DecodeBatch(dst []byte, keys [][]byte) []byte {
	l := t.p.valueSize
	total := len(keys) * l
	dst = slices.Grow(dst, total)
	out := dst[len(dst) : len(dst)+total]

	// The subset table lives in the caller's output: its chunks·16 cells are the output slots
	// of the last keys. We decode the front with the table, then the tail without it,
	// overwriting the table. This keeps DecodeBatch free of allocations and of hidden
	// per-Table state; requiring twice as many keys as table cells keeps the tail at most half
	// the batch.
	chunks := (t.p.dense + combBits - 1) / combBits
	tableCells := chunks << combBits
	if len(keys) < 2*tableCells || !combWorthIt(t.p.dense, len(keys)) {
		t.decodeGroups(out, keys, nil)
		return dst[:len(dst)+total]
	}
	split := len(keys) - tableCells
	comb := newCombTable(out[split*l:], t.cells[t.p.sparse()*l:], t.p.dense, l)
	t.decodeGroups(out[:split*l], keys[:split], &comb)
	t.decodeGroups(out[split*l:], keys[split:], nil)
	return dst[:len(dst)+total]
}

// batchGroup is how many keys DecodeBatch hashes ahead of the XORs.
const batchGroup = 8

// cacheLine is the stride at which DecodeBatch touches sparse rows.
const cacheLine = 64

// decodeGroups decodes keys into out, len(keys)·ℓ bytes, with comb if it is not nil.
func (t *Table) decodeGroups(out []byte, keys [][]byte, comb *combTable) {
	l := t.p.valueSize
	dense := t.cells[t.p.sparse()*l:]
	var ps [batchGroup]position
	var rows [maxRows]*byte
	for g := 0; g < len(keys); g += batchGroup {
		m := min(batchGroup, len(keys)-g)
		// Hash a group first, then touch every cache line of each key's two sparse rows before
		// XORing: the rows are random reads from a table of up to hundreds of MiB, and issuing
		// the misses of a whole group together overlaps their DRAM latencies instead of paying
		// them one key at a time (measured 1.2–1.8× faster at n = 100k).
		for j := range m {
			ps[j] = t.p.locate(&t.seed, keys[g+j])
		}
		var touch byte
		for j := range m {
			touch ^= t.touch(&ps[j])
		}
		keepAlive(touch)
		for j := range m {
			o := out[(g+j)*l : (g+j)*l+l]
			r := t.sparseRows(o, &ps[j], rows[:0])
			if comb != nil {
				r = comb.appendRows(r, ps[j].r0, ps[j].r1)
			} else {
				r = appendDenseRows(r, dense, l, ps[j].r0, ps[j].r1)
			}
			xorRows(o, r)
		}
	}
}

// touch reads one byte of every cache line of the two sparse rows of ps, so that their
// misses are in flight together.
func (t *Table) touch(ps *position) byte {
	if t.p.n == 0 {
		return 0
	}
	var x byte
	r1, r2 := t.cell(int(ps.h1)), t.cell(int(ps.h2))
	for o := 0; o < len(r1); o += cacheLine {
		x ^= r1[o] ^ r2[o]
	}
	return x
}

// keepAlive stops the compiler from dropping touch's loads, whose only purpose is to start
// the cache misses.
//
//go:noinline
func keepAlive(byte) {}

func (t *Table) decodeInto(out, key []byte) {
	ps := t.p.locate(&t.seed, key)
	var rows [maxRows]*byte
	l := t.p.valueSize
	// Start all cache misses of the two sparse rows at once; the XOR below walks them block
	// by block, interleaved with 30-odd dense rows, and would otherwise meet them one at a
	// time (measured 1.3–1.6× faster at n = 100k × 1 KiB).
	keepAlive(t.touch(&ps))
	dense := t.cells[t.p.sparse()*l:]
	xorRows(out, appendDenseRows(t.sparseRows(out, &ps, rows[:0]), dense, l, ps.r0, ps.r1))
}

// sparseRows starts a decode: it sets out = D[h₁] and appends D[h₂] to the rows to XOR in.
// An empty table (n = 0) has no sparse cells, and the value is the dense inner product alone.
func (t *Table) sparseRows(out []byte, ps *position, rows []*byte) []*byte {
	if t.p.n == 0 {
		clear(out)
		return rows
	}
	copy(out, t.cell(int(ps.h1)))
	return append(rows, &t.cells[int(ps.h2)*t.p.valueSize])
}
