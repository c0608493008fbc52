package okvs

import (
	"bytes"
	"cmp"
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"slices"
)

// fillKeySize is the AES-256 key, read from the caller's rand on every attempt, whose CTR
// keystream provides the random fill of the table.
const fillKeySize = 32

// errUnsolvable marks an attempt that failed only because of its seed (σ > d, or a
// rank-deficient dense system); a fresh seed is expected to succeed.
var errUnsolvable = errors.New("okvs: hash graph not solvable with this seed")

// peeled records that edge (pair) e was removed from the cuckoo graph through its
// then-degree-1 vertex w; unpeeling assigns cell w from e's value.
type peeled struct{ e, w uint32 }

// encoder holds the scratch space of one Encode call, reused across seed attempts.
type encoder struct {
	keys, values [][]byte
	p            params

	pos   []position // per pair
	deg   []uint32   // per sparse cell: number of unpeeled incident edges
	xr    []uint32   // per sparse cell: XOR of the ids of unpeeled incident edges
	queue []uint32
	order []peeled

	maxAttempts int
	coreEdges   int // size of the last attempt's 2-core (tests only)
	// onAttempt, if set, sees the seed and outcome of every attempt (tests only).
	onAttempt func(seed [SeedSize]byte, err error)
}

func newEncoder(keys, values [][]byte, p params) *encoder {
	return &encoder{keys: keys, values: values, p: p, maxAttempts: MaxAttempts}
}

func (e *encoder) encode(rand io.Reader) (*Table, error) {
	t := &Table{p: e.p, cells: make([]byte, e.p.cells()*e.p.valueSize)}
	var lastErr error
	for attempt := range e.maxAttempts {
		var fillKey [fillKeySize]byte
		if _, err := io.ReadFull(rand, t.seed[:]); err != nil {
			return nil, fmt.Errorf("okvs: read seed: %w", err)
		}
		if _, err := io.ReadFull(rand, fillKey[:]); err != nil {
			return nil, fmt.Errorf("okvs: read fill key: %w", err)
		}
		err := e.attempt(t, &fillKey, attempt > 0)
		if e.onAttempt != nil {
			e.onAttempt(t.seed, err)
		}
		if err == nil {
			return t, nil
		}
		if !errors.Is(err, errUnsolvable) {
			return nil, err
		}
		lastErr = err
	}
	return nil, fmt.Errorf("okvs: encode %d pairs: gave up after %d seeds: %w", e.p.n, e.maxAttempts, lastErr)
}

// attempt runs spec §4.2 steps 1–6 with the seed in t.seed.
func (e *encoder) attempt(t *Table, fillKey *[fillKeySize]byte, dirty bool) error {
	p := &e.p
	n := p.n
	e.pos = slices.Grow(e.pos[:0], n)[:n]
	for i, k := range e.keys {
		e.pos[i] = p.locate(&t.seed, k)
	}

	core := e.peel()
	e.coreEdges = len(core)
	var s *coreSystem
	if len(core) > 0 {
		if err := e.checkDuplicates(core); err != nil {
			return err
		}
		s = e.structure(core)
		if len(s.nonTree) > p.d {
			return fmt.Errorf("%w: %d independent cycles exceed d = %d", errUnsolvable, len(s.nonTree), p.d)
		}
	}

	if err := e.fill(t, fillKey, dirty); err != nil {
		return err
	}
	if s != nil {
		if err := e.solveCore(t, s); err != nil {
			return err
		}
	}
	e.unpeel(t)
	return nil
}

// fill does step 6 first: every cell that unpeeling will not overwrite starts uniformly
// random, so a cell that no equation determines keeps random bytes (never zeros), and steps
// 3–5's "random root / random other endpoint / random free dense cell" are simply the cell's
// current content. The cells unpeeling assigns (about n of the 2.4n + d + λ) are skipped,
// which saves 40 % of the keystream; the keystream runs over the others in cell order.
func (e *encoder) fill(t *Table, fillKey *[fillKeySize]byte, dirty bool) error {
	blk, err := aes.NewCipher(fillKey[:])
	if err != nil {
		return fmt.Errorf("okvs: fill cipher: %w", err)
	}
	var iv [aes.BlockSize]byte
	ctr := cipher.NewCTR(blk, iv[:])
	if dirty {
		clear(t.cells) // XORKeyStream below writes keystream ⊕ cells, so start from zeros
	}
	// deg is free again after peeling; reuse it to mark the cells unpeeling assigns.
	assigned := e.deg
	clear(assigned)
	for _, pe := range e.order {
		assigned[pe.w] = 1
	}
	l := e.p.valueSize
	start := 0 // first cell of the current run of unassigned cells
	for i, a := range assigned {
		if a != 0 {
			ctr.XORKeyStream(t.cells[start*l:i*l], t.cells[start*l:i*l])
			start = i + 1
		}
	}
	ctr.XORKeyStream(t.cells[start*l:], t.cells[start*l:]) // the last run and the dense part
	return nil
}

// peel implements step 2 and returns the ids of the edges left in the 2-core (usually none).
// deg/xr is the XOR-peeling trick: a degree-1 vertex's only edge is the XOR of its edge ids.
func (e *encoder) peel() []uint32 {
	p := &e.p
	m := p.sparse()
	e.deg = slices.Grow(e.deg[:0], m)[:m]
	e.xr = slices.Grow(e.xr[:0], m)[:m]
	clear(e.deg)
	clear(e.xr)
	deg, xr, pos := e.deg, e.xr, e.pos
	for i := range pos {
		deg[pos[i].h1]++
		xr[pos[i].h1] ^= uint32(i)
		deg[pos[i].h2]++
		xr[pos[i].h2] ^= uint32(i)
	}
	q := e.queue[:0]
	for v, dv := range deg {
		if dv == 1 {
			q = append(q, uint32(v))
		}
	}
	order := e.order[:0]
	for len(q) > 0 {
		v := q[len(q)-1]
		q = q[:len(q)-1]
		if deg[v] != 1 {
			continue // its edge was peeled from the other side meanwhile
		}
		i := xr[v]
		order = append(order, peeled{e: i, w: v})
		o := pos[i].h1 ^ pos[i].h2 ^ v
		deg[v] = 0
		deg[o]--
		xr[o] ^= i
		if deg[o] == 1 {
			q = append(q, o)
		}
	}
	e.queue, e.order = q, order
	if len(order) == len(pos) {
		return nil
	}
	inCore := make([]bool, len(pos))
	for i := range inCore {
		inCore[i] = true
	}
	for _, pe := range order {
		inCore[pe.e] = false
	}
	var core []uint32
	for i, c := range inCore {
		if c {
			core = append(core, uint32(i))
		}
	}
	return core
}

// checkDuplicates looks for equal keys. Equal keys always hash to parallel edges, which form a
// cycle that peeling never removes, so searching the (small) 2-core finds every duplicate
// without hashing all keys into a set.
func (e *encoder) checkDuplicates(core []uint32) error {
	pos := e.pos
	sorted := slices.Clone(core)
	slices.SortFunc(sorted, func(a, b uint32) int {
		pa, pb := &pos[a], &pos[b]
		return cmp.Or(cmp.Compare(pa.h1, pb.h1), cmp.Compare(pa.h2, pb.h2),
			cmp.Compare(pa.r0, pb.r0), cmp.Compare(pa.r1, pb.r1), cmp.Compare(a, b))
	})
	for j := 1; j < len(sorted); j++ {
		a, b := sorted[j-1], sorted[j]
		if pos[a] != pos[b] {
			continue
		}
		if bytes.Equal(e.keys[a], e.keys[b]) {
			return fmt.Errorf("%w: keys[%d] == keys[%d]", ErrDuplicateKey, a, b)
		}
		// Distinct keys with the same 2·log m′ + d + λ hash bits: astronomically unlikely,
		// and fixed by another seed.
		return fmt.Errorf("%w: keys[%d] and keys[%d] collide", errUnsolvable, a, b)
	}
	return nil
}

// coreSystem is the 2-core cut into BFS spanning trees (step 3).
type coreSystem struct {
	verts   []uint32    // local vertex → cell index
	tree    []treeEdge  // in BFS order, so a parent is always set before its child
	nonTree []coreEdge  // one GF(2) equation each; len = σ
	a       [][2]uint64 // per local vertex: cell = C ⊕ ⟨a, D_dense⟩
}

type treeEdge struct {
	e        uint32 // pair id
	from, to int32  // local vertices, from is the parent
}

type coreEdge struct {
	e    uint32
	x, y int32
}

// structure computes the spanning forest of the 2-core. It touches no cell bytes, so the
// σ > d check is cheap when it fails.
func (e *encoder) structure(core []uint32) *coreSystem {
	pos := e.pos
	// xr is no longer needed after peeling; reuse it as the cell → local vertex map, and deg
	// (zero exactly for cells outside the core and for core cells already numbered) as the mark.
	local, mark := e.xr, e.deg
	s := &coreSystem{}
	for _, i := range core {
		for _, v := range [2]uint32{pos[i].h1, pos[i].h2} {
			if mark[v] != 0 {
				mark[v] = 0
				local[v] = uint32(len(s.verts))
				s.verts = append(s.verts, v)
			}
		}
	}
	nv := len(s.verts)
	start := make([]int32, nv+1)
	for _, i := range core {
		start[local[pos[i].h1]+1]++
		start[local[pos[i].h2]+1]++
	}
	for v := range nv {
		start[v+1] += start[v]
	}
	adj := make([]int32, 2*len(core)) // core edge index
	fill := slices.Clone(start[:nv])
	for ci, i := range core {
		for _, v := range [2]uint32{pos[i].h1, pos[i].h2} {
			lv := local[v]
			adj[fill[lv]] = int32(ci)
			fill[lv]++
		}
	}

	visited := make([]bool, nv)
	used := make([]bool, len(core))
	queue := make([]int32, 0, nv)
	for root := range int32(nv) {
		if visited[root] {
			continue
		}
		visited[root] = true
		queue = append(queue[:0], root)
		for len(queue) > 0 {
			x := queue[0]
			queue = queue[1:]
			for _, ci := range adj[start[x]:start[x+1]] {
				if used[ci] {
					continue
				}
				used[ci] = true
				i := core[ci]
				y := int32(local[pos[i].h1^pos[i].h2^s.verts[x]])
				if visited[y] {
					s.nonTree = append(s.nonTree, coreEdge{e: i, x: x, y: y})
					continue
				}
				visited[y] = true
				s.tree = append(s.tree, treeEdge{e: i, from: x, to: y})
				queue = append(queue, y)
			}
		}
	}
	return s
}

// solveCore runs steps 3–4: it writes every 2-core cell and the dense cells that the 2-core's
// equations determine. The other dense cells keep their random fill.
func (e *encoder) solveCore(t *Table, s *coreSystem) error {
	p := &e.p
	l := p.valueSize
	sparse := p.sparse()
	dense := t.cells[sparse*l:]

	// Along each tree edge (parent x, child y, pair i): cell[y] = v_i ⊕ cell[x] ⊕ ⟨r_i, D⟩.
	// Roots keep their random fill; each cell holds its constant part C and a its linear part.
	s.a = make([][2]uint64, len(s.verts))
	for _, te := range s.tree {
		x, y := s.verts[te.from], s.verts[te.to]
		subtle.XORBytes(t.cell(int(y)), e.values[te.e], t.cell(int(x)))
		r := &e.pos[te.e]
		s.a[te.to] = [2]uint64{s.a[te.from][0] ^ r.r0, s.a[te.from][1] ^ r.r1}
	}

	// Each non-tree edge (x, y, pair i) closes a cycle: ⟨a_x ⊕ a_y ⊕ r_i, D⟩ = v_i ⊕ C_x ⊕ C_y.
	rows := make([][2]uint64, len(s.nonTree))
	rhs := make([][]byte, len(s.nonTree))
	rhsBuf := make([]byte, len(s.nonTree)*l)
	for j, ce := range s.nonTree {
		r := &e.pos[ce.e]
		rows[j] = [2]uint64{s.a[ce.x][0] ^ s.a[ce.y][0] ^ r.r0, s.a[ce.x][1] ^ s.a[ce.y][1] ^ r.r1}
		rhs[j] = rhsBuf[j*l : j*l+l]
		subtle.XORBytes(rhs[j], e.values[ce.e], t.cell(int(s.verts[ce.x])))
		subtle.XORBytes(rhs[j], rhs[j], t.cell(int(s.verts[ce.y])))
	}
	if err := solveDense(dense, l, p.dense, rows, rhs); err != nil {
		return err
	}

	for lv, v := range s.verts {
		xorDenseRow(t.cell(int(v)), dense, l, s.a[lv][0], s.a[lv][1])
	}
	return nil
}

// solveDense solves rows·D = rhs over GF(2) by Gauss–Jordan elimination and writes the pivot
// dense cells; free dense cells keep their random content (step 4). There are σ ≤ d rows of
// at most 128 columns, so this is at most a few thousand XORs of ℓ bytes.
func solveDense(dense []byte, l, ncols int, rows [][2]uint64, rhs [][]byte) error {
	pivots := make([]int, 0, len(rows))
	rank := 0
	for col := 0; col < ncols && rank < len(rows); col++ {
		w, bit := col/64, uint64(1)<<(col%64)
		pr := -1
		for j := rank; j < len(rows); j++ {
			if rows[j][w]&bit != 0 {
				pr = j
				break
			}
		}
		if pr < 0 {
			continue
		}
		rows[rank], rows[pr] = rows[pr], rows[rank]
		rhs[rank], rhs[pr] = rhs[pr], rhs[rank]
		for j := range rows {
			if j != rank && rows[j][w]&bit != 0 {
				rows[j][0] ^= rows[rank][0]
				rows[j][1] ^= rows[rank][1]
				subtle.XORBytes(rhs[j], rhs[j], rhs[rank])
			}
		}
		pivots = append(pivots, col)
		rank++
	}
	for j := rank; j < len(rows); j++ {
		// A zero row: consistent only if its right-hand side is zero too.
		if !allZero(rhs[j]) {
			return fmt.Errorf("%w: dense system has rank %d < %d", errUnsolvable, rank, len(rows))
		}
	}
	// In reduced form each pivot row mentions its pivot column and free columns only.
	for j := range rank {
		col := pivots[j]
		out := dense[col*l : col*l+l]
		copy(out, rhs[j])
		r0, r1 := rows[j][0], rows[j][1]
		if col < 64 {
			r0 &^= 1 << col
		} else {
			r1 &^= 1 << (col - 64)
		}
		xorDenseRow(out, dense, l, r0, r1)
	}
	return nil
}

func allZero(b []byte) bool {
	var acc byte
	for _, c := range b {
		acc |= c
	}
	return acc == 0
}

// unpeel runs step 5: in reverse peeling order, each pair's free cell w is set so the pair
// decodes correctly; its other endpoint is already final (random fill or assigned earlier).
func (e *encoder) unpeel(t *Table) {
	p := &e.p
	l := p.valueSize
	dense := t.cells[p.sparse()*l:]
	var comb combTable
	useComb := combWorthIt(p.dense, len(e.order))
	if useComb {
		comb = newCombTable(nil, dense, p.dense, l)
	}
	var rowBuf [maxRows]*byte
	for k := len(e.order) - 1; k >= 0; k-- {
		pe := e.order[k]
		r := &e.pos[pe.e]
		o := r.h1 ^ r.h2 ^ pe.w
		out := t.cell(int(pe.w))
		copy(out, e.values[pe.e])
		rows := append(rowBuf[:0], &t.cells[int(o)*l])
		if useComb {
			rows = comb.appendRows(rows, r.r0, r.r1)
		} else {
			rows = appendDenseRows(rows, dense, l, r.r0, r.r1)
		}
		xorRows(out, rows)
	}
}
