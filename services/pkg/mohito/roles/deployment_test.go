package roles

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/obscura-iot/obscura/services/pkg/mohito"
)

// TestEncoderPlacement is the encoders' placement (issue 15 #6: the weight
// used to scale every partition's score for a vendor alike and never changed
// the winner): over random deployments, every partition count assigns each
// vendor exactly once; no partition's expected load exceeds (1+ε) × its fair
// share unless it holds a single vendor larger than that; large vendors
// spread (two vendors carrying almost everything never share one of two
// partitions); and a rescale P → P+1 moves, over the whole run, at most
// three times the weight an ideal consistent hash would (1/(P+1) of it).
func TestEncoderPlacement(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var moved, ideal float64
	for trial := range 200 {
		n := 1 + rng.IntN(64)
		d := Deployment{Params: mohito.Params{Vendors: n}, Delta: uint64(rng.IntN(8))}
		for range n {
			d.Policy = append(d.Policy, mohito.TargetPolicy{Base: uint64(rng.IntN(5000)), Width: uint64(rng.IntN(200))})
		}
		weight := func(v int) float64 { return float64(d.Policy[v].Base+d.Delta+d.Policy[v].Width/2) + 1 }
		var total float64
		for v := range n {
			total += weight(v)
		}
		owners := func(p int) []int {
			d.Encoders = p
			out := d.Placement()
			owned := 0
			load := make([]float64, p)
			count := make([]int, p)
			for q := range p {
				for _, v := range d.VendorsOf(q) {
					if out[v] != q || d.EncoderOf(v) != q {
						t.Fatalf("trial %d: VendorsOf(%d) of %d lists vendor %d owned by %d", trial, q, p, v, out[v])
					}
					owned++
					load[q] += weight(v)
					count[q]++
				}
			}
			if owned != n {
				t.Fatalf("trial %d: %d partitions own %d of %d vendors", trial, p, owned, n)
			}
			bound := (1 + EncoderLoadSlack) * total / float64(p)
			for q := range p {
				if load[q] > bound && count[q] > 1 {
					// Over the bound only by the one vendor no partition could take.
					var largest float64
					for _, v := range d.VendorsOf(q) {
						largest = max(largest, weight(v))
					}
					if load[q]-largest > bound {
						t.Fatalf("trial %d: partition %d of %d carries %.0f of %.0f (bound %.0f)", trial, q, p, load[q], total, bound)
					}
				}
			}
			return out
		}
		prev := owners(1)
		for p := 2; p <= 9; p++ {
			cur := owners(p)
			for v := range n {
				if prev[v] != cur[v] {
					moved += weight(v)
				}
			}
			ideal += total / float64(p)
			prev = cur
		}
	}
	if moved > 3*ideal {
		t.Fatalf("rescaling moved %.0f units of expected load, %.1f× the %.0f of an ideal consistent hash", moved, moved/ideal, ideal)
	}
	t.Logf("rescaling moved %.2f× the ideal", moved/ideal)

	// Two vendors carrying almost all entries never share one of two partitions.
	for seed := range 100 {
		n := 2 + seed%6
		d := Deployment{Params: mohito.Params{Vendors: n}, Encoders: 2}
		for v := range n {
			base := uint64(1)
			if v == seed%n || v == (seed+1)%n {
				base = 1000
			}
			d.Policy = append(d.Policy, mohito.TargetPolicy{Base: base})
		}
		if out := d.Placement(); out[seed%n] == out[(seed+1)%n] {
			t.Fatalf("%d vendors: the two large ones share partition %d: %v", n, out[seed%n], out)
		}
	}
}

// TestTableTTLCoversTwoRounds: sealed tables live two whole rounds (period and response phase),
// at least a minute — not the ten minutes that filled the memory store.
func TestTableTTLCoversTwoRounds(t *testing.T) {
	for _, c := range []struct {
		round, shuffler, deadline time.Duration
		want                      time.Duration
	}{
		{2 * time.Second, 1500 * time.Millisecond, 2 * time.Second, time.Minute},                                                     // 2 × 15.5 s < 1 min
		{time.Minute, 1500 * time.Millisecond, time.Minute, 2 * (time.Minute + 1500*time.Millisecond + time.Minute + 3*time.Minute)}, // long rounds
	} {
		d := Deployment{Round: c.round, ShufflerTimeout: c.shuffler, ResponseDeadline: c.deadline}
		if got := d.TableTTL(); got != c.want {
			t.Errorf("round %v: table TTL %v, want %v", c.round, got, c.want)
		}
		if d.TableTTL() < 2*(d.Round+d.ResponsePhase()) {
			t.Errorf("round %v: a table may expire while a round could read it", c.round)
		}
	}
}
