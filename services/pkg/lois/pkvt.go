package lois

import (
	"math"
	"math/bits"
	"unsafe"
)

// The (2,4) partial-key Vacuum table (spec §3.6.1, §7.1): m buckets of 4 slots; an id hashes
// to bucket B₁ and fingerprint f, and its other candidate is Alt(B₁, f) = B₁ ⊕ (f·0x5bd1e995 ∧
// (L_{f mod 4} − 1)). Because the alternate range depends on f alone, a resident can be moved
// knowing only its slot — the table never needs the key. Each L is a power of two and m is a
// multiple of every L, so Alt stays in [0, m) and is an involution.

const (
	slotsPerBucket = 4
	maxEvictions   = 400 // D-23, the reference code's value
	altMul         = 0x5bd1e995
	sizingLoad     = 0.96 // [X] buckets = items / 0.96 / 4
)

// geometry is what every table of one DVT shares (homogeneity, spec §3.6.2).
type geometry struct {
	m    uint32    // buckets
	mask [4]uint32 // L_i − 1
}

func (g *geometry) alt(b uint32, f uint16) uint32 {
	return b ^ ((uint32(f) * altMul) & g.mask[f&3])
}

// bucketFP maps a 64-bit hash to the first bucket and the 16-bit fingerprint: f ∈ [1, 2¹⁶−1]
// so 0 can mark an empty slot ([X] fingerprint encoding).
func (g *geometry) bucketFP(h uint64) (uint32, uint16) {
	b := uint32((h >> 32) * uint64(g.m) >> 32)
	f := uint16(uint32(h)%0xFFFF + 1)
	return b, f
}

func upperPow2(x int) int {
	if x <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(x-1))
}

func roundUp(a, b int) int { return (a + b - 1) / b * b }

// ballsInBinsMaxLoad and properAltRange follow the Vacuum filter reference init() ([X],
// spec §3.6.1 steps 4–5).
func ballsInBinsMaxLoad(balls, bins float64) float64 {
	if bins == 1 {
		return balls
	}
	c := balls / (bins * math.Log(bins))
	if c < 5 {
		x := c + 0.1
		f := func(x float64) float64 { return 1 + x*(math.Log(c)-math.Log(x)+1) - c }
		for k := 0; math.Abs(f(x)) > 0.001 && k < 1000; k++ {
			x -= f(x) / (math.Log(c) - math.Log(x))
		}
		return (x + 1) * math.Log(bins)
	}
	return balls/bins + 1.5*math.Sqrt(2*balls/bins*math.Log(bins))
}

func properAltRange(m, i int) int {
	const b, lf = 4.0, 0.95
	r := 8
	for ; r < m; r <<= 1 {
		f := float64(4-i) * 0.25
		if ballsInBinsMaxLoad(f*b*lf*float64(m), float64(m)/float64(r)) < 0.97*b*float64(r) {
			return r
		}
	}
	return r
}

// sizeGeometry reproduces the reference init() for maxItems items per table, then rounds m
// up to a multiple of the largest alternate range ([R] §3.6.1 step 3).
func sizeGeometry(maxItems int) geometry {
	n := int(float64(maxItems) / sizingLoad / slotsPerBucket)
	if n < 1 {
		n = 1
	}
	var L [4]int
	if n < 10000 {
		var l int
		if n < 256 {
			l = upperPow2(n)
		} else {
			l = upperPow2(n / 4)
		}
		n = roundUp(n, l)
		L = [4]int{l, l, l, l}
	} else {
		L[0] = properAltRange(n, 0)
		n = roundUp(n, L[0])
		for i := 1; i < 4; i++ {
			L[i] = properAltRange(n, i)
		}
		L[0] = max(L[0], 1024)
		L[3] *= 2
		n = roundUp(n, max(L[0], L[1], L[2], L[3]))
	}
	g := geometry{m: uint32(n)}
	for i := range L {
		g.mask[i] = uint32(L[i] - 1)
	}
	return g
}

// table is one PK Vacuum table, or (with vals false) one Vacuum filter of the DVF. In 16-bit
// mode a slot is its fingerprint (fp); in exact mode it is the whole id (D-7), 0 marking an
// empty slot because id 0 is never issued (§3.3), and the fingerprint that steers evictions
// is recomputed from the id. A bucket's keys are contiguous (4 × 8 bytes share one cache
// line), and the value (keystream, SID) sits in a separate array touched only on a hit, so a
// lookup costs about three cache lines: 26 bytes per slot exact, 20 in 16-bit mode.
type table struct {
	fp  []uint16  // 16-bit mode and filters
	id  []uint64  // exact mode
	val []slotVal // nil for a filter
	g   *geometry
	key *sipKey
	// bookkeeping for the DVT's expiry and consumption rules (§3.6.2, D-17, D-18)
	count     int
	inserted  int
	consumed  int
	maxExpiry int64
}

type slotVal struct {
	ks  [16]byte
	sid uint16
}

func newTable(g *geometry, key *sipKey, exact, vals bool) *table {
	s := int(g.m) * slotsPerBucket
	t := &table{g: g, key: key}
	if exact {
		t.id = make([]uint64, s)
		adviseHuge(unsafe.Pointer(unsafe.SliceData(t.id)), uintptr(s)*8)
	} else {
		t.fp = make([]uint16, s)
		adviseHuge(unsafe.Pointer(unsafe.SliceData(t.fp)), uintptr(s)*2)
	}
	if vals {
		t.val = make([]slotVal, s)
		adviseHuge(unsafe.Pointer(unsafe.SliceData(t.val)), uintptr(s)*unsafe.Sizeof(slotVal{}))
	}
	return t
}

func (t *table) slots() int { return max(len(t.fp), len(t.id)) }

func (t *table) occupied(s uint32) bool {
	if t.id != nil {
		return t.id[s] != 0
	}
	return t.fp[s] != 0
}

// fpAt is the fingerprint of the resident of slot s.
func (t *table) fpAt(s uint32) uint16 {
	if t.id != nil {
		_, f := t.g.bucketFP(t.key.sum64(t.id[s]))
		return f
	}
	return t.fp[s]
}

// item is a slot's content while it moves.
type item struct {
	f   uint16
	sid uint16
	id  uint64
	ks  [16]byte
}

func (t *table) get(s uint32) item {
	it := item{f: t.fpAt(s)}
	if t.val != nil {
		it.sid, it.ks = t.val[s].sid, t.val[s].ks
	}
	if t.id != nil {
		it.id = t.id[s]
	}
	return it
}

func (t *table) put(s uint32, it item) {
	if t.id != nil {
		t.id[s] = it.id
	} else {
		t.fp[s] = it.f
	}
	if t.val != nil {
		t.val[s] = slotVal{it.ks, it.sid}
	}
}

func (t *table) clearSlot(s uint32) {
	if t.id != nil {
		t.id[s] = 0
	} else {
		t.fp[s] = 0
	}
	if t.val != nil {
		t.val[s] = slotVal{} // a consumed keystream does not linger in memory
	}
}

func (t *table) emptySlot(b uint32) int {
	for j := uint32(0); j < slotsPerBucket; j++ {
		if !t.occupied(b*slotsPerBucket + j) {
			return int(b*slotsPerBucket + j)
		}
	}
	return -1
}

func (t *table) load(b uint32) int {
	n := 0
	for j := uint32(0); j < slotsPerBucket; j++ {
		if t.occupied(b*slotsPerBucket + j) {
			n++
		}
	}
	return n
}

// find returns the slot of (f, id) among the 8 candidate slots, or -1. In 16-bit mode f alone
// decides (spec §3.6.1: exact for live ids, false matches for others); in exact mode the id
// (never 0: the DVT refuses to look 0 up).
func (t *table) find(b1, b2 uint32, f uint16, id uint64) int {
	if t.id != nil {
		k1 := t.id[b1*slotsPerBucket : b1*slotsPerBucket+slotsPerBucket]
		for j, x := range k1 {
			if x == id {
				return int(b1*slotsPerBucket) + j
			}
		}
		k2 := t.id[b2*slotsPerBucket : b2*slotsPerBucket+slotsPerBucket]
		for j, x := range k2 {
			if x == id {
				return int(b2*slotsPerBucket) + j
			}
		}
		return -1
	}
	for _, b := range [2]uint32{b1, b2} {
		base := b * slotsPerBucket
		for j := uint32(0); j < slotsPerBucket; j++ {
			if t.fp[base+j] == f {
				return int(base + j)
			}
		}
	}
	return -1
}

// rng is the eviction coin: a xorshift generator, because kicks need no secrecy (the hash
// keys already are) and must not allocate.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s ^= r.s << 13
	r.s ^= r.s >> 7
	r.s ^= r.s << 17
	return r.s
}

// insert places it with candidate buckets b1, b2 = Alt(b1, f) (Algorithm 1 as corrected in
// spec §7.1). On failure it returns the item left homeless and the bucket it was heading for,
// which the DVT carries into the next table.
func (t *table) insert(g *geometry, r *rng, it item, b1 uint32) (ok bool, victim item, vb uint32) {
	b2 := g.alt(b1, it.f)
	s1, s2 := t.emptySlot(b1), t.emptySlot(b2)
	if s1 >= 0 || s2 >= 0 {
		s := s1
		if s1 < 0 || (s2 >= 0 && t.load(b2) < t.load(b1)) {
			s = s2
		}
		t.put(uint32(s), it)
		t.count++
		return true, item{}, 0
	}
	b := b1
	if r.next()&1 == 1 {
		b = b2
	}
	cur := it
	for range maxEvictions {
		if s := t.emptySlot(b); s >= 0 {
			t.put(uint32(s), cur)
			t.count++
			return true, item{}, 0
		}
		// One-step look-ahead: can a resident move to its own alternate bucket?
		for j := uint32(0); j < slotsPerBucket; j++ {
			s := b*slotsPerBucket + j
			a := g.alt(b, t.fpAt(s))
			if e := t.emptySlot(a); e >= 0 {
				t.put(uint32(e), t.get(s))
				t.put(s, cur)
				t.count++
				return true, item{}, 0
			}
		}
		s := b*slotsPerBucket + uint32(r.next()%slotsPerBucket)
		evicted := t.get(s)
		t.put(s, cur)
		cur = evicted
		b = g.alt(b, cur.f)
	}
	return false, cur, b
}
