package okvs

import (
	"bytes"
	"errors"
	mrand "math/rand/v2"
	"strings"
	"testing"
)

func testRand(seed uint64) *mrand.ChaCha8 {
	var s [32]byte
	s[0], s[1], s[31] = byte(seed), byte(seed>>8), 0xee
	return mrand.NewChaCha8(s)
}

func testPairs(r *mrand.ChaCha8, n, l int) (keys, values [][]byte) {
	for range n {
		k, v := make([]byte, 16), make([]byte, l)
		r.Read(k)
		r.Read(v)
		keys, values = append(keys, k), append(values, v)
	}
	return keys, values
}

func checkTable(t *testing.T, tab *Table, keys, values [][]byte) {
	t.Helper()
	for i, k := range keys {
		if got := tab.Decode(nil, k); !bytes.Equal(got, values[i]) {
			t.Fatalf("Decode(keys[%d]) != values[%d]", i, i)
		}
	}
}

// The 2-core path (BFS trees, Gaussian elimination) runs on a good fraction of ordinary
// encodings; make sure it is exercised and correct, with cores of several cycles.
func TestCoreIsExercised(t *testing.T) {
	r := testRand(1)
	withCore, maxCore := 0, 0
	for range 60 {
		keys, values := testPairs(r, 300, 16)
		e := newEncoder(keys, values, newParams(len(keys), 16))
		tab, err := e.encode(r)
		if err != nil {
			t.Fatal(err)
		}
		checkTable(t, tab, keys, values)
		if e.coreEdges > 0 {
			withCore++
		}
		maxCore = max(maxCore, e.coreEdges)
	}
	if withCore < 10 {
		t.Errorf("only %d of 60 encodings had a non-empty 2-core", withCore)
	}
	t.Logf("%d of 60 encodings had a 2-core, the largest %d edges", withCore, maxCore)

	// A dense graph (sparse rate 1.0 instead of 2.4, and a matching large dense part) has a
	// big 2-core with many independent cycles; the solver must handle it too.
	keys, values := testPairs(r, 200, 32)
	p := newParams(200, 32)
	p.halfL, p.halfR = 100, 100
	p.d, p.dense = 90, 128
	e := newEncoder(keys, values, p)
	tab, err := e.encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if e.coreEdges < 20 {
		t.Errorf("dense graph: 2-core of only %d edges", e.coreEdges)
	}
	checkTable(t, tab, keys, values)
}

// Spec §9.1 item 3: exercise the failure-and-retry path. A dense part of λ' = 4 cells with
// d = 0 makes every attempt whose cuckoo graph has a cycle fail, so a deterministic rand
// quickly gives a run that fails first and succeeds with a later seed.
func TestRetryWithFreshSeed(t *testing.T) {
	for s := uint64(0); s < 100; s++ {
		r := testRand(1000 + s)
		keys, values := testPairs(r, 200, 16)
		p := newParams(len(keys), 16)
		p.d, p.dense = 0, 4
		e := newEncoder(keys, values, p)
		var seeds [][SeedSize]byte
		var errs []error
		e.onAttempt = func(seed [SeedSize]byte, err error) {
			seeds = append(seeds, seed)
			errs = append(errs, err)
		}
		tab, err := e.encode(r)
		if err != nil || len(seeds) < 2 {
			continue
		}
		if !errors.Is(errs[0], errUnsolvable) || !strings.Contains(errs[0].Error(), "cycles exceed") {
			t.Fatalf("first attempt: err = %v, want too many cycles", errs[0])
		}
		if tab.seed != seeds[len(seeds)-1] || tab.seed == seeds[0] {
			t.Fatal("the table does not carry the seed of the successful attempt")
		}
		for i := 1; i < len(seeds); i++ {
			if seeds[i] == seeds[i-1] {
				t.Fatal("a retry reused the previous seed")
			}
		}
		b, _ := tab.MarshalBinary()
		if !bytes.Equal(b[16:32], tab.seed[:]) {
			t.Fatal("the header does not carry the seed")
		}
		checkTable(t, tab, keys, values)
		return
	}
	t.Fatal("no seed in 100 gave a failing first attempt")
}

// The other failure: few enough cycles but a rank-deficient dense system (here: one dense
// column for several equations).
func TestRetryAfterRankDeficiency(t *testing.T) {
	sawRank := false
	for s := uint64(0); s < 200 && !sawRank; s++ {
		r := testRand(2000 + s)
		keys, values := testPairs(r, 40, 16)
		p := newParams(len(keys), 16)
		p.halfL, p.halfR = 30, 30
		p.d, p.dense = 60, 1
		e := newEncoder(keys, values, p)
		e.maxAttempts = 64
		e.onAttempt = func(_ [SeedSize]byte, err error) {
			if err != nil && strings.Contains(err.Error(), "rank") {
				sawRank = true
			}
		}
		tab, err := e.encode(r)
		if err != nil {
			continue
		}
		checkTable(t, tab, keys, values)
	}
	if !sawRank {
		t.Fatal("never hit a rank-deficient system")
	}
}

// With a graph that can never be solved, Encode gives up after maxAttempts with a clear error.
func TestGiveUp(t *testing.T) {
	r := testRand(3)
	keys, values := testPairs(r, 4, 16)
	p := newParams(len(keys), 16)
	p.halfL, p.halfR = 1, 1 // four parallel edges: σ = 3
	p.d, p.dense = 1, 2
	e := newEncoder(keys, values, p)
	attempts := 0
	e.onAttempt = func([SeedSize]byte, error) { attempts++ }
	_, err := e.encode(r)
	if err == nil || !errors.Is(err, errUnsolvable) || errors.Is(err, ErrDuplicateKey) {
		t.Fatalf("err = %v, want unsolvable", err)
	}
	if attempts != MaxAttempts || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("%d attempts, err = %v", attempts, err)
	}
}

func TestCombTableMatchesBitLoop(t *testing.T) {
	r := testRand(4)
	for _, ndense := range []int{1, 3, 4, 5, 48, 63, 64, 65, 67, 85, 128} {
		l := 32
		dense := make([]byte, ndense*l)
		r.Read(dense)
		c := newCombTable(nil, dense, ndense, l)
		p := params{dense: ndense}
		m0, m1 := p.denseMask()
		for range 200 {
			r0, r1 := r.Uint64()&m0, r.Uint64()&m1
			want := make([]byte, l)
			xorDenseRow(want, dense, l, r0, r1)
			got := make([]byte, l)
			c.xorRow(got, r0, r1)
			if !bytes.Equal(got, want) {
				t.Fatalf("dense=%d: comb table disagrees with the bit loop", ndense)
			}
		}
	}
}

func TestParams(t *testing.T) {
	for _, c := range []struct{ n, halfL, halfR, d int }{
		{0, 0, 0, 8},
		{1, 2, 1, 8},
		{2, 3, 2, 9},
		{5, 6, 6, 11},
		{1000, 1200, 1200, 18},
		{1024, 1229, 1229, 18},
		{1025, 1230, 1230, 19},
		{100000, 120000, 120000, 25},
	} {
		p := newParams(c.n, 32)
		if p.halfL != c.halfL || p.halfR != c.halfR || p.d != c.d || p.dense != c.d+Lambda {
			t.Errorf("n=%d: got L=%d R=%d d=%d dense=%d, want %d %d %d %d",
				c.n, p.halfL, p.halfR, p.d, p.dense, c.halfL, c.halfR, c.d, c.d+Lambda)
		}
	}
	// The dense row must fit two words for every allowed n.
	if p := newParams(MaxPairs, 16); p.dense > 128 {
		t.Errorf("dense part of %d columns at MaxPairs", p.dense)
	}
}

// locate must spread keys over both halves and mask the dense row to d+λ bits.
func TestLocateRanges(t *testing.T) {
	r := testRand(5)
	p := newParams(777, 16)
	var seed [SeedSize]byte
	r.Read(seed[:])
	m0, m1 := p.denseMask()
	hitL := make([]bool, p.halfL)
	for range 20000 {
		k := make([]byte, 16)
		r.Read(k)
		ps := p.locate(&seed, k)
		if int(ps.h1) >= p.halfL || int(ps.h2) < p.halfL || int(ps.h2) >= p.sparse() {
			t.Fatalf("positions %d, %d out of range", ps.h1, ps.h2)
		}
		if ps.r0&^m0 != 0 || ps.r1&^m1 != 0 {
			t.Fatal("dense row has bits past d+λ")
		}
		hitL[ps.h1] = true
	}
	for i, h := range hitL {
		if !h {
			t.Fatalf("cell %d of L never hit by 20000 keys", i)
		}
	}
}

// The assembly xorRows must agree with the portable one for every length and row count,
// including lengths that are not multiples of its 128-, 32- and 8-byte blocks.
func TestXorRowsMatchesGeneric(t *testing.T) {
	r := testRand(6)
	pool := make([]byte, 140*300)
	r.Read(pool)
	for _, l := range []int{1, 7, 8, 9, 16, 24, 31, 32, 33, 48, 100, 127, 128, 129, 160, 200, 255, 256, 300} {
		for _, nrows := range []int{0, 1, 2, 3, 35, maxRows} {
			rows := make([]*byte, nrows)
			for i := range rows {
				rows[i] = &pool[int(r.Uint64()%uint64(len(pool)-l+1))]
			}
			got := make([]byte, l)
			r.Read(got)
			want := bytes.Clone(got)
			xorRows(got, rows)
			xorRowsGeneric(want, rows)
			if !bytes.Equal(got, want) {
				t.Fatalf("l=%d rows=%d: xorRows disagrees with xorRowsGeneric", l, nrows)
			}
		}
	}
}
