package bloom

import (
	"encoding/binary"
	"math"
	"testing"
)

// §3.6: the closed form reproduces the spec's [D] table for every layout, and the expected load.
func TestFalsePositiveRateTable(t *testing.T) {
	for _, tc := range []struct {
		m, k int
		want float64
	}{
		{1707, 3, 0.0476}, {1707, 4, 0.04145}, {1707, 5, 0.0409},
		{1688, 4, 0.04283}, {1632, 3, 0.0529}, {1632, 4, 0.04722}, {1632, 5, 0.0475}, {1624, 4, 0.04789},
	} {
		got := Params{M: tc.m, K: tc.k, N: 256}.FalsePositiveRate()
		if math.Abs(got-tc.want) > 5e-5*math.Max(1, tc.want*100) {
			t.Errorf("M=%d K=%d: %.5f, spec %.5f", tc.m, tc.k, got, tc.want)
		}
	}
	for _, tc := range []struct {
		m    int
		want float64
	}{{1707, 770.2}, {1632, 760.8}} {
		if got := (Params{M: tc.m, K: 4, N: 256}).ExpectedPopcount(); math.Abs(got-tc.want) > 0.1 {
			t.Errorf("M=%d: expected popcount %.1f, spec %.1f", tc.m, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{{M: 7, K: 4, N: 1}, {M: 1632, K: 0, N: 256}, {M: 1632, K: 9, N: 256}, {M: 1632, K: 4, N: 0}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if err := (Params{M: 1632, K: 8, N: 256}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// Insert/Has use bit b = byte b>>3, mask 1<<(b&7) and LE32 words mod M (§3.6 index rule).
func TestIndexRuleAndBitOrder(t *testing.T) {
	p := Params{M: 1632, K: 2, N: 256}
	f := View(p, make([]byte, p.Bytes()))
	var d Digest
	d[0], d[1] = 0x0b, 0x00 // word 0 = 11
	d[4], d[5] = 0x70, 0x06 // word 1 = 1648 → 1648 mod 1632 = 16
	f.Insert(&d)
	if f.Bits()[1] != 1<<3 || f.Bits()[2] != 1 || f.Popcount() != 2 || !f.Has(&d) {
		t.Fatalf("bits % x", f.Bits()[:3])
	}
}

// TestIndexIsModulo: the fast modulo equals LE32 mod M for every M the frame could use and
// words at the edges and in between.
func TestIndexIsModulo(t *testing.T) {
	words := []uint32{0, 1, 2, 1631, 1632, 1633, 1<<31 - 1, 1 << 31, 1<<32 - 2, 1<<32 - 1}
	r := uint32(12345)
	for range 2000 {
		r = r*1664525 + 1013904223
		words = append(words, r)
	}
	for _, m := range []int{8, 9, 1000, 1632, 1633, 1 << 16, 1<<31 + 11, 1<<32 - 1} {
		f := Filter{p: Params{M: m, K: 1, N: 1}, mod: fastMod(m)} // index reads no bits
		for _, w := range words {
			var d Digest
			binary.LittleEndian.PutUint32(d[:], w)
			if got, want := f.index(&d, 0), w%uint32(m); got != want {
				t.Fatalf("M=%d w=%d: index %d, want %d", m, w, got, want)
			}
		}
	}
}
