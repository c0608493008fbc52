package roles

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// χ² critical values at significance α = 0.001 (upper 0.1 % quantiles).
const (
	chi2Crit15 = 37.697 // 15 degrees of freedom
	chi2Crit23 = 49.728 // 23 degrees of freedom
)

func chi2(counts []int, expected float64) float64 {
	s := 0.0
	for _, c := range counts {
		d := float64(c) - expected
		s += d * d / expected
	}
	return s
}

// testItems returns n distinct random items (the mixer only hashes and moves them).
func testItems(rnd *rand.ChaCha8, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, 48)
		rnd.Read(out[i])
	}
	return out
}

// TestMixerShuffleUniform is T-PRIV-7 on the mixer's window-mode shuffle as the mixer
// runs it (ProxySecrets.shuffleWindow: pda.Shuffle under a PRG keyed by K_mix, the window
// and the item set). 1 000 windows, each with participant 1 and participant 2 submitting
// 8 disjoint items: for each of participant 1's items, its forwarded position must pass a
// χ² uniformity test over the 16 positions (15 df, α = 0.001 each, so ≤ 0.8 % for the
// eight together) — in both arrival orders (participant 1 first, participant 2 first),
// so the forwarded order does not follow arrival. Then the whole permutation: 24 000
// windows of 4 items must spread over the 24 orders (23 df, α = 0.001). Everything is
// seeded (K_mix and the items), so the outcome is deterministic. A Sattolo-style shuffle
// (never a fixed point), an identity, or an order tied to arrival fails here.
func TestMixerShuffleUniform(t *testing.T) {
	sec := &ProxySecrets{}
	for i := range sec.Mix {
		sec.Mix[i] = byte(i*7 + 1)
	}
	rnd := rand.NewChaCha8([32]byte{'T', '-', 'P', 'R', 'I', 'V', '-', '7'})
	const runs, per = 1000, 8
	for _, p1First := range []bool{true, false} {
		counts := make([][]int, per) // p1's item i → forwarded position histogram
		for i := range counts {
			counts[i] = make([]int, 2*per)
		}
		for r := range runs {
			p1, p2 := testItems(rnd, per), testItems(rnd, per)
			items := slices.Concat(p1, p2)
			if !p1First {
				items = slices.Concat(p2, p1)
			}
			if _, err := sec.shuffleWindow(uint64(r+1), items); err != nil {
				t.Fatal(err)
			}
			for i, it := range p1 {
				pos := slices.IndexFunc(items, func(b []byte) bool { return bytes.Equal(b, it) })
				if pos < 0 {
					t.Fatal("an item was lost in the shuffle")
				}
				counts[i][pos]++
			}
		}
		for i, c := range counts {
			if x := chi2(c, float64(runs)/(2*per)); x > chi2Crit15 {
				t.Errorf("participant 1 first=%v: item %d's position is not uniform: χ² = %.1f > %.3f (%v)", p1First, i, x, chi2Crit15, c)
			}
		}
	}

	// The whole permutation of four items over 24 000 windows.
	const windows = 24000
	perms := map[[4]byte]int{}
	for r := range windows {
		items := testItems(rnd, 4)
		ref := slices.Clone(items)
		if _, err := sec.shuffleWindow(uint64(r+1), items); err != nil {
			t.Fatal(err)
		}
		var key [4]byte
		for i, it := range items {
			key[i] = byte(slices.IndexFunc(ref, func(b []byte) bool { return bytes.Equal(b, it) }))
		}
		perms[key]++
	}
	if len(perms) != 24 {
		t.Fatalf("%d of the 24 orders of four items occurred", len(perms))
	}
	c := make([]int, 0, 24)
	for _, n := range perms {
		c = append(c, n)
	}
	if x := chi2(c, windows/24.0); x > chi2Crit23 {
		t.Errorf("orders of four items not uniform: χ² = %.1f > %.3f", x, chi2Crit23)
	}
}

// TestMixerShuffleReproducible: the order depends on K_mix, the window and the item set
// only through the PRG seed — a resumed seal reshuffles the same arrival order to the same
// forwarded order, while another K_mix or another window gives another order.
func TestMixerShuffleReproducible(t *testing.T) {
	rnd := rand.NewChaCha8([32]byte{1})
	items := testItems(rnd, 64)
	order := func(mix byte, w uint64) [][]byte {
		sec := &ProxySecrets{Mix: [32]byte{mix}}
		it := slices.Clone(items)
		if _, err := sec.shuffleWindow(w, it); err != nil {
			t.Fatal(err)
		}
		return it
	}
	eq := func(a, b [][]byte) bool { return slices.EqualFunc(a, b, bytes.Equal) }
	if !eq(order(1, 5), order(1, 5)) {
		t.Fatal("the same window reshuffled differently")
	}
	if eq(order(1, 5), order(2, 5)) || eq(order(1, 5), order(1, 6)) || eq(order(1, 5), items) {
		t.Fatal("order does not depend on K_mix and the window")
	}
}
