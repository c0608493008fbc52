package roles

import (
	"math/rand/v2"
	"testing"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
)

// TestEncoderOfMinimalMoves is the consistent-hashing property of the
// encoder partitions: scaling P → P+1 moves a vendor only onto the new
// partition P, scaling P+1 → P moves only the vendors of the removed
// partition, and every count partitions the vendors (each owned exactly once).
func TestEncoderOfMinimalMoves(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + rng.IntN(64)
		d := Deployment{Params: mohito.Params{Vendors: n}, Delta: uint64(rng.IntN(8))}
		for range n {
			d.Policy = append(d.Policy, mohito.TargetPolicy{Base: uint64(rng.IntN(5000)), Width: uint64(rng.IntN(200))})
		}
		owners := func(p int) []int {
			d.Encoders = p
			out := make([]int, n)
			for v := range out {
				out[v] = d.EncoderOf(v)
			}
			owned := 0
			for q := range p {
				for _, v := range d.VendorsOf(q) {
					if out[v] != q {
						t.Fatalf("trial %d: VendorsOf(%d) of %d lists vendor %d owned by %d", trial, q, p, v, out[v])
					}
					owned++
				}
			}
			if owned != n {
				t.Fatalf("trial %d: %d partitions own %d of %d vendors", trial, p, owned, n)
			}
			return out
		}
		prev := owners(1)
		for p := 2; p <= 9; p++ {
			cur := owners(p)
			for v := range n {
				// Read the other way (p → p−1) this is: only vendors of the
				// removed partition p−1 move.
				if prev[v] != cur[v] && cur[v] != p-1 {
					t.Fatalf("trial %d: scaling %d ↔ %d moved vendor %d between kept partitions %d and %d", trial, p-1, p, v, prev[v], cur[v])
				}
			}
			prev = cur
		}
	}
}
